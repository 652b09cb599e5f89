//! The built-in agent's tools: `search`, `read_file` and `calc` as function tools, each with the
//! schema of its arguments. The simulated executors call them and the agent offers their
//! definitions to the LLM; what a search finds is fixed by its query, so the script can
//! know it in advance ([`figure_for`]).

use serde_json::{Value, json};
use spool_exec::FunctionTools;

use super::seed::{fnv1a, mix};

/// The demo's tools as function tools: `search`, `read_file` and `calc`, each with the
/// schema of its arguments. The simulated executors call them (see
/// [`FunctionTools::call`]), and the agent offers their definitions to the LLM.
pub(crate) fn function_tools() -> FunctionTools {
    let string_arg = |name: &str, description: &str| {
        json!({
            "type": "object",
            "description": description,
            "properties": {name: {"type": "string", "minLength": 1}},
            "required": [name],
            "additionalProperties": false,
        })
    };
    FunctionTools::new()
        .register(
            "search",
            string_arg("query", "Search the notes: hits and a figure."),
            search,
        )
        .and_then(|tools| {
            tools.register(
                "read_file",
                string_arg("path", "Read a file: its lines and first line."),
                read_file,
            )
        })
        .and_then(|tools| {
            tools.register(
                "calc",
                string_arg("expr", "Evaluate integer + - * / ( )."),
                calc,
            )
        })
        // The schemas are the demo's own: a test checks that they compile.
        .unwrap_or_else(|error| unreachable!("the demo's tool schemas compile: {error}"))
}

/// The simulated `search` tool: a few hits and a figure, both fixed by the query.
fn search(args: &Value) -> Result<Value, String> {
    let query = args["query"].as_str().unwrap_or_default();
    let hits: Vec<String> = (1..=3)
        .map(|n| format!("{query} — result {n} of {}", 10 + fnv1a(query) % 90))
        .collect();
    Ok(json!({"query": query, "hits": hits, "figure": figure_for(query)}))
}

/// The figure a search for `query` reports: 100 to 999, fixed by the query.
pub(crate) fn figure_for(query: &str) -> i64 {
    100 + (mix(0x5eed, fnv1a(query)) % 900) as i64
}

/// The simulated `read_file` tool: a made-up size and first line, fixed by the path.
fn read_file(args: &Value) -> Result<Value, String> {
    let path = args["path"].as_str().unwrap_or_default();
    let lines = 5 + fnv1a(path) % 400;
    Ok(json!({"path": path, "lines": lines, "first_line": format!("// {path}: {lines} lines")}))
}

/// The `calc` tool: evaluates an integer expression with `+ - * /` and parentheses.
fn calc(args: &Value) -> Result<Value, String> {
    let expr = args["expr"].as_str().unwrap_or_default();
    let value = evaluate(expr).map_err(|why| format!("cannot evaluate {expr:?}: {why}"))?;
    Ok(json!({"expr": expr, "value": value}))
}

/// Evaluates an integer expression: `expr := term (('+'|'-') term)*`,
/// `term := factor (('*'|'/') factor)*`, `factor := '-' factor | number | '(' expr ')'`.
pub(crate) fn evaluate(text: &str) -> Result<i64, String> {
    let mut parser = Parser {
        bytes: text.as_bytes(),
        at: 0,
    };
    let value = parser.expr(0)?;
    parser.skip_spaces();
    match parser.bytes.get(parser.at) {
        None => Ok(value),
        Some(&c) => Err(format!(
            "unexpected `{}` at column {} of {text:?}",
            c as char,
            parser.at + 1
        )),
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Parser<'_> {
    const MAX_DEPTH: u32 = 64;

    fn skip_spaces(&mut self) {
        while self.bytes.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_spaces();
        self.bytes.get(self.at).copied()
    }

    fn expr(&mut self, depth: u32) -> Result<i64, String> {
        let mut value = self.term(depth)?;
        while let Some(op @ (b'+' | b'-')) = self.peek() {
            self.at += 1;
            let rhs = self.term(depth)?;
            value = if op == b'+' {
                value.checked_add(rhs)
            } else {
                value.checked_sub(rhs)
            }
            .ok_or_else(|| "overflow".to_owned())?;
        }
        Ok(value)
    }

    fn term(&mut self, depth: u32) -> Result<i64, String> {
        let mut value = self.factor(depth)?;
        while let Some(op @ (b'*' | b'/')) = self.peek() {
            self.at += 1;
            let rhs = self.factor(depth)?;
            value = if op == b'*' {
                value
                    .checked_mul(rhs)
                    .ok_or_else(|| "overflow".to_owned())?
            } else {
                value
                    .checked_div(rhs)
                    .ok_or_else(|| "division by zero or overflow".to_owned())?
            };
        }
        Ok(value)
    }

    fn factor(&mut self, depth: u32) -> Result<i64, String> {
        if depth > Self::MAX_DEPTH {
            return Err("expression nested too deeply".to_owned());
        }
        match self.peek() {
            Some(b'-') => {
                self.at += 1;
                self.factor(depth + 1)?
                    .checked_neg()
                    .ok_or_else(|| "overflow".to_owned())
            }
            Some(b'(') => {
                self.at += 1;
                let value = self.expr(depth + 1)?;
                if self.peek() != Some(b')') {
                    return Err(format!("missing `)` at column {}", self.at + 1));
                }
                self.at += 1;
                Ok(value)
            }
            Some(c) if c.is_ascii_digit() => {
                let start = self.at;
                while self.bytes.get(self.at).is_some_and(u8::is_ascii_digit) {
                    self.at += 1;
                }
                let digits =
                    std::str::from_utf8(&self.bytes[start..self.at]).map_err(|e| e.to_string())?;
                digits.parse::<i64>().map_err(|e| format!("{digits}: {e}"))
            }
            Some(c) => Err(format!(
                "unexpected `{}` at column {}",
                c as char,
                self.at + 1
            )),
            None => Err("unexpected end of expression".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use spool_core::RequestError;

    use super::*;

    #[test]
    fn the_tools_check_their_arguments() {
        let tools = function_tools();
        assert_eq!(
            tools.call("calc", &json!({"expr": "391 * 7"})),
            Ok(json!({"expr": "391 * 7", "value": 2737}))
        );
        assert_eq!(
            tools.call("calc", &json!({"expr": ""})),
            Err(RequestError::InvalidArguments {
                message: "arguments of `calc` do not fit its schema: /expr: must not be empty"
                    .to_owned()
            })
        );
        assert_eq!(
            tools.call("calc", &json!({"expr": "1 / 0"})),
            Err(RequestError::failed(
                "cannot evaluate \"1 / 0\": division by zero or overflow"
            ))
        );
        assert_eq!(
            tools.call("search", &json!({"q": "x"})),
            Err(RequestError::InvalidArguments {
                message: "arguments of `search` do not fit its schema: /q: property is not allowed; /query: required property is missing".to_owned()
            })
        );
    }

    #[test]
    fn calc_evaluates_with_precedence_and_parentheses() {
        assert_eq!(evaluate("391 * 7"), Ok(2737));
        assert_eq!(evaluate("2 + 3 * 4"), Ok(14));
        assert_eq!(evaluate("(2 + 3) * 4"), Ok(20));
        assert_eq!(evaluate("10 - -3"), Ok(13));
        assert_eq!(evaluate(" 7 / 2 "), Ok(3));
    }

    #[test]
    fn calc_rejects_what_it_cannot_compute() {
        assert!(evaluate("1 / 0").is_err());
        assert!(evaluate("(1 + 2").is_err());
        assert!(evaluate("1 + x").is_err());
        assert!(evaluate("").is_err());
        assert!(evaluate("9223372036854775807 + 1").is_err());
        assert!(evaluate(&"(".repeat(1000)).is_err());
    }
}
