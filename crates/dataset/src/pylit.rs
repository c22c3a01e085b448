//! A parser for the Python literals InjecAgent uses (dicts, lists, tuples, strings,
//! numbers, `True`/`False`/`None`), producing JSON values.

use serde_json::{Map, Number, Value};

/// Deepest nesting accepted.
const MAX_DEPTH: usize = 64;

/// Where and why a literal failed to parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("python literal: {what} at byte {at}")]
pub struct PyLitError {
    what: &'static str,
    at: usize,
}

/// Parses one Python literal; trailing non-space input is an error.
pub fn parse(src: &str) -> Result<Value, PyLitError> {
    let mut p = Parser {
        s: src.as_bytes(),
        i: 0,
    };
    let v = p.value(0)?;
    p.ws();
    if p.i != p.s.len() {
        return Err(p.err("trailing input"));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err(&self, what: &'static str) -> PyLitError {
        PyLitError { what, at: self.i }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\n' | b'\t' | b'\r')) {
            self.i += 1;
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, PyLitError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nesting too deep"));
        }
        self.ws();
        match self.peek() {
            Some(b'{') => self.dict(depth),
            Some(b'[') => self.seq(b']', depth),
            Some(b'(') => self.seq(b')', depth),
            Some(b'\'' | b'"') => self.string().map(Value::String),
            Some(b'-' | b'+' | b'0'..=b'9' | b'.') => self.number(),
            Some(_) => self.word(),
            None => Err(self.err("unexpected end")),
        }
    }

    fn dict(&mut self, depth: usize) -> Result<Value, PyLitError> {
        self.i += 1;
        let mut map = Map::new();
        loop {
            self.ws();
            if self.peek() == Some(b'}') {
                self.i += 1;
                return Ok(Value::Object(map));
            }
            let key = match self.value(depth + 1)? {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                _ => return Err(self.err("dict key must be a string or number")),
            };
            self.ws();
            if self.peek() != Some(b':') {
                return Err(self.err("expected `:`"));
            }
            self.i += 1;
            let v = self.value(depth + 1)?;
            map.insert(key, v);
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {}
                _ => return Err(self.err("expected `,` or `}`")),
            }
        }
    }

    fn seq(&mut self, close: u8, depth: usize) -> Result<Value, PyLitError> {
        self.i += 1;
        let mut items = Vec::new();
        loop {
            self.ws();
            if self.peek() == Some(close) {
                self.i += 1;
                return Ok(Value::Array(items));
            }
            items.push(self.value(depth + 1)?);
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(c) if c == close => {}
                _ => return Err(self.err("expected `,` or closing bracket")),
            }
        }
    }

    fn string(&mut self) -> Result<String, PyLitError> {
        let quote = self.peek().ok_or_else(|| self.err("unexpected end"))?;
        self.i += 1;
        let mut out: Vec<u8> = Vec::new();
        loop {
            let c = self.peek().ok_or_else(|| self.err("unterminated string"))?;
            self.i += 1;
            match c {
                c if c == quote => break,
                b'\\' => {
                    let e = self.peek().ok_or_else(|| self.err("unterminated escape"))?;
                    self.i += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'0' => out.push(0),
                        b'\\' | b'\'' | b'"' => out.push(e),
                        b'\n' => {}
                        b'x' => self.push_code(2, &mut out)?,
                        b'u' => self.push_code(4, &mut out)?,
                        b'U' => self.push_code(8, &mut out)?,
                        other => {
                            out.push(b'\\');
                            out.push(other);
                        }
                    }
                }
                c => out.push(c),
            }
        }
        String::from_utf8(out).map_err(|_| self.err("invalid utf-8 in string"))
    }

    fn push_code(&mut self, digits: usize, out: &mut Vec<u8>) -> Result<(), PyLitError> {
        let hex = self
            .s
            .get(self.i..self.i + digits)
            .ok_or_else(|| self.err("short escape"))?;
        let hex = std::str::from_utf8(hex).map_err(|_| self.err("bad escape"))?;
        let code = u32::from_str_radix(hex, 16).map_err(|_| self.err("bad escape"))?;
        let ch = char::from_u32(code).ok_or_else(|| self.err("escape is not a character"))?;
        self.i += digits;
        let mut buf = [0u8; 4];
        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
        Ok(())
    }

    fn number(&mut self) -> Result<Value, PyLitError> {
        let start = self.i;
        while matches!(
            self.peek(),
            Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'_' | b'0'..=b'9')
        ) {
            self.i += 1;
        }
        let text: String = self
            .s
            .get(start..self.i)
            .unwrap_or_default()
            .iter()
            .filter(|&&b| b != b'_')
            .map(|&b| char::from(b))
            .collect();
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Value::Number(i.into()));
        }
        let f: f64 = text.parse().map_err(|_| self.err("bad number"))?;
        Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| self.err("non-finite number"))
    }

    fn word(&mut self) -> Result<Value, PyLitError> {
        for (w, v) in [
            ("True", Value::Bool(true)),
            ("False", Value::Bool(false)),
            ("None", Value::Null),
        ] {
            if self.s.get(self.i..self.i + w.len()) == Some(w.as_bytes()) {
                self.i += w.len();
                return Ok(v);
            }
        }
        Err(self.err("unexpected token"))
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests")]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_python_literals() {
        let v = parse("{'a': [1, -2.5, True, None], \"b\": ('x', 'it\\'s'), 'c': {}}").unwrap();
        assert_eq!(
            v,
            json!({"a": [1, -2.5, true, null], "b": ["x", "it's"], "c": {}})
        );
        assert_eq!(parse("'\\u20ac\\x41'").unwrap(), json!("€A"));
    }

    #[test]
    fn rejects_garbage_without_panicking() {
        for bad in [
            "{",
            "{'a' 1}",
            "[1,",
            "'abc",
            "tru",
            "{'a': 1} x",
            "\\",
            "((((",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        let deep = "[".repeat(200);
        assert!(parse(&deep).is_err());
    }
}
