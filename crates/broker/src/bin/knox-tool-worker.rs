//! The confined tool worker (see `knox_broker::worker`).

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(u8::try_from(knox_broker::worker::serve()).unwrap_or(1))
}
