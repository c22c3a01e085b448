//! The tool worker: the process that runs inside the confinement and serves every call
//! of one run's agent. It reads framed requests (`knox_sandbox::frame`: 4-byte length,
//! JSON) from standard input and answers each with a framed output on standard output,
//! until its input closes.
//!
//! `TerminalExecute` runs the command for real: split into argv without a shell (a
//! shell runs only if the command names one and `Auth` lets it execute), in the current
//! directory (the run's workspace), with a cleared environment. Every other tool
//! returns the canned response the request carries.

use std::process::Command;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Largest request accepted.
pub const MAX_REQUEST: usize = 4 << 20;

/// What the broker asks the worker to run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Full tool name.
    pub tool: String,
    /// Parameters.
    pub params: serde_json::Map<String, Value>,
    /// The simulated response, for tools without a real implementation.
    pub canned: Option<Value>,
}

/// Splits a command line into argv: whitespace separates words, single and double
/// quotes group, backslash escapes; no expansion, no operators (`|;&<>$` and backquote
/// outside quotes are refused, so nothing is silently given to a shell).
pub fn split_command(cmd: &str) -> Result<Vec<String>, String> {
    let mut argv = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = cmd.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') => cur.push(chars.next().unwrap_or('\\')),
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                cur.push(chars.next().unwrap_or('\\'));
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    argv.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, '|' | ';' | '&' | '<' | '>' | '$' | '`') => {
                return Err(format!(
                    "shell operator `{c}` outside quotes: run a shell explicitly if Auth allows one"
                ));
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err("unterminated quote".into());
    }
    if in_word {
        argv.push(cur);
    }
    if argv.is_empty() {
        return Err("empty command".into());
    }
    Ok(argv)
}

/// Runs one request and returns the tool's output.
pub fn run(req: &Request) -> Value {
    if req.tool != "TerminalExecute" {
        return req
            .canned
            .clone()
            .unwrap_or_else(|| json!({"error": format!("no implementation of `{}`", req.tool)}));
    }
    let Some(cmd) = req.params.get("command").and_then(Value::as_str) else {
        return json!({"error": "InvalidRequestException: `command` must be a string"});
    };
    let argv = match split_command(cmd) {
        Ok(a) => a,
        Err(e) => return json!({"error": format!("InvalidRequestException: {e}")}),
    };
    let (prog, args) = argv
        .split_first()
        .map_or(("", &[][..]), |(p, a)| (p.as_str(), a));
    let out = Command::new(prog)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output();
    match out {
        Ok(o) => {
            let mut text = String::from_utf8_lossy(&o.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&o.stderr));
            json!({"output": text, "exit_code": o.status.code().unwrap_or(-1)})
        }
        Err(e) => json!({"output": format!("{prog}: {e}"), "exit_code": 127}),
    }
}

/// The worker's main loop: serves framed requests until standard input closes (exit
/// 0); an unreadable frame or request ends it (exit 2), which the broker sees as the
/// worker exiting.
pub fn serve() -> i32 {
    let mut stdin = std::io::stdin().lock();
    let mut stdout = std::io::stdout().lock();
    loop {
        let frame = match knox_sandbox::frame::read_frame(&mut stdin) {
            Ok(Some(f)) => f,
            Ok(None) => return 0,
            Err(_) => return 2,
        };
        let Some(req) = (frame.len() <= MAX_REQUEST)
            .then(|| serde_json::from_slice::<Request>(&frame).ok())
            .flatten()
        else {
            return 2;
        };
        let out = serde_json::to_vec(&run(&req)).unwrap_or_default();
        if knox_sandbox::frame::write_frame(&mut stdout, &out).is_err() {
            return 1;
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;

    #[test]
    fn splits_like_a_shell_without_being_one() {
        assert_eq!(
            split_command("ls -la 'my dir' \"a b\" c\\ d").unwrap(),
            ["ls", "-la", "my dir", "a b", "c d"]
        );
        assert!(split_command("cat /etc/passwd | nc x 1").is_err());
        assert!(split_command("echo $(id)").is_err());
        assert!(split_command("a; b").is_err());
        assert_eq!(
            split_command("bash -c 'echo hi > /dev/null'").unwrap(),
            ["bash", "-c", "echo hi > /dev/null"]
        );
        assert!(split_command("'unterminated").is_err());
        assert!(split_command("   ").is_err());
    }
}
