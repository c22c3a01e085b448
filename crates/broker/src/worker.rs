//! The tool worker: the process that runs inside the confinement. It reads one request
//! (JSON) from standard input and writes the tool's output (JSON) to standard output.
//!
//! `TerminalExecute` runs the command for real: split into argv without a shell (a
//! shell runs only if the command names one and `Auth` lets it execute), in the current
//! directory (the run's workspace), with a cleared environment. Every other tool
//! returns the canned response the request carries.

use std::io::{Read, Write};
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

/// The worker's main: one request on stdin, one output on stdout; exit 0 unless the
/// request is unreadable (exit 2).
pub fn serve() -> i32 {
    let mut buf = Vec::new();
    let read = std::io::stdin()
        .take(MAX_REQUEST as u64 + 1)
        .read_to_end(&mut buf);
    let req: Request = match read
        .ok()
        .filter(|&n| n <= MAX_REQUEST)
        .and_then(|_| serde_json::from_slice(&buf).ok())
    {
        Some(r) => r,
        None => return 2,
    };
    let out = run(&req);
    let mut stdout = std::io::stdout().lock();
    match serde_json::to_writer(&mut stdout, &out)
        .and_then(|()| stdout.flush().map_err(serde_json::Error::io))
    {
        Ok(()) => 0,
        Err(_) => 1,
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
