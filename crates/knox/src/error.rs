//! Exit codes: every failure of every command is classified once into one of a few
//! kinds (the BSD `sysexits.h` numbers), and `main` maps the kind to the process exit
//! status and, under `--json`, to a JSON error object. The conventions are every Knox
//! command's, whichever crate owns it: `knox_command::error`; this is that module.

pub use knox_command::error::*;
