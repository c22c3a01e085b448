//! Exit codes: every failure of every command is classified once, here, into one of a
//! few kinds (the BSD `sysexits.h` numbers), and `main` maps the kind to the process
//! exit status and, under `--json`, to a JSON error object.
//!
//! Results that are not failures keep their own small codes per command: `verify`'s
//! 0 complete / 1 tampered / 2 prefix / 3 refused / 4 unreadable evidence, and 1 for
//! "ran, and the answer is no" elsewhere (see each command's `--help`).

use std::fmt;

/// What kind of failure ended a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// 64: the command line is wrong (an unknown option, a missing or conflicting one).
    Usage,
    /// 65: an input file exists but its content is not what the option takes.
    DataErr,
    /// 66: an input file or directory does not exist or cannot be opened.
    NoInput,
    /// 69: something the command needs is not available here: a model not in the cache,
    /// a server, a kernel feature, the probe binary, TEE hardware.
    Unavailable,
    /// 70: an internal error (a bug: please report it).
    Software,
    /// 73: an output file or directory cannot be created or written.
    CantCreate,
    /// 74: reading or writing failed part-way (disk, pipe).
    IoErr,
}

impl Kind {
    /// The process exit status.
    pub fn code(self) -> u8 {
        match self {
            Self::Usage => 64,
            Self::DataErr => 65,
            Self::NoInput => 66,
            Self::Unavailable => 69,
            Self::Software => 70,
            Self::CantCreate => 73,
            Self::IoErr => 74,
        }
    }

    /// The machine-readable name in a JSON error object.
    pub fn name(self) -> &'static str {
        match self {
            Self::Usage => "usage",
            Self::DataErr => "bad_input",
            Self::NoInput => "missing_input",
            Self::Unavailable => "unavailable",
            Self::Software => "internal",
            Self::CantCreate => "cannot_create_output",
            Self::IoErr => "io",
        }
    }
}

/// A failure with its kind; its message is complete (file, cause, what to do).
#[derive(Debug)]
pub struct Failure {
    /// The kind, hence the exit code.
    pub kind: Kind,
    /// The whole message.
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Failure {}

/// A failure of `kind` saying `message`.
pub fn fail(kind: Kind, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Failure {
        kind,
        message: message.into(),
    })
}

/// Gives a result's error a kind.
pub trait KindExt<T> {
    /// The error, of `kind`, its message unchanged.
    fn kind(self, kind: Kind) -> anyhow::Result<T>;
    /// The error, of `kind`, as `what: <error>`.
    fn kind_context(self, kind: Kind, what: impl FnOnce() -> String) -> anyhow::Result<T>;
}

impl<T, E: Into<anyhow::Error>> KindExt<T> for Result<T, E> {
    fn kind(self, kind: Kind) -> anyhow::Result<T> {
        self.map_err(|e| {
            let e: anyhow::Error = e.into();
            if e.downcast_ref::<Failure>().is_some() {
                return e;
            }
            fail(kind, format!("{e:#}"))
        })
    }

    fn kind_context(self, kind: Kind, what: impl FnOnce() -> String) -> anyhow::Result<T> {
        self.map_err(|e| {
            let e: anyhow::Error = e.into();
            fail(kind, format!("{}: {e:#}", what()))
        })
    }
}

/// The kind of `e`: the kind it was given, else one read from the error it wraps
/// (a missing file, unreadable JSON), else internal.
pub fn classify(e: &anyhow::Error) -> Kind {
    if let Some(f) = e.downcast_ref::<Failure>() {
        return f.kind;
    }
    for cause in e.chain() {
        if let Some(f) = cause.downcast_ref::<Failure>() {
            return f.kind;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::NotFound => Kind::NoInput,
                _ => Kind::IoErr,
            };
        }
        if cause.downcast_ref::<serde_json::Error>().is_some() {
            return Kind::DataErr;
        }
    }
    Kind::Software
}

/// The JSON error object printed under `--json`.
pub fn json(kind: Kind, message: &str) -> serde_json::Value {
    serde_json::json!({"error": {"code": kind.code(), "kind": kind.name(), "message": message}})
}

/// The exit-code table for a command's `--help`, with `results` (its own codes for
/// results that are not failures) first.
#[macro_export]
macro_rules! exit_codes {
    ($results:expr) => {
        concat!(
            "Exit codes:\n",
            $results,
            "\n  64  usage: a wrong or missing option\
             \n  65  bad input: an input file's content is not what the option takes\
             \n  66  missing input: an input file does not exist or cannot be opened\
             \n  69  unavailable: a model, server, kernel feature or device this needs\
             \n  70  internal error (a bug)\
             \n  73  cannot create or write an output\
             \n  74  I/O error part-way\
             \nWith --json, a failure prints {\"error\": {\"code\", \"kind\", \"message\"}} on standard output."
        )
    };
}
