//! A JSON-Schema subset for tool arguments: compiled once by [`Schema::new`], which
//! refuses any keyword it does not know (so a typo is an error, never a constraint that
//! silently does not hold), then [`Schema::check`]ed against each call's arguments,
//! listing every violation with its JSON path.

use std::fmt;

use serde_json::{Map, Number, Value};

/// The keywords a schema may use, in the order the error messages list them.
const KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "enum",
    "const",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "description",
    "title",
];

/// The longest quote of a value in a violation's message, in characters.
const QUOTE_CHARS: usize = 60;

/// A JSON type, as `type` names it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum JsonType {
    Object,
    Array,
    String,
    Number,
    Integer,
    Boolean,
    Null,
}

impl JsonType {
    fn parse(name: &str) -> Option<JsonType> {
        Some(match name {
            "object" => JsonType::Object,
            "array" => JsonType::Array,
            "string" => JsonType::String,
            "number" => JsonType::Number,
            "integer" => JsonType::Integer,
            "boolean" => JsonType::Boolean,
            "null" => JsonType::Null,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            JsonType::Object => "object",
            JsonType::Array => "array",
            JsonType::String => "string",
            JsonType::Number => "number",
            JsonType::Integer => "integer",
            JsonType::Boolean => "boolean",
            JsonType::Null => "null",
        }
    }

    /// The type with its article, as a message says it: "an object", "null".
    fn spoken(self) -> &'static str {
        match self {
            JsonType::Object => "an object",
            JsonType::Array => "an array",
            JsonType::String => "a string",
            JsonType::Number => "a number",
            JsonType::Integer => "an integer",
            JsonType::Boolean => "a boolean",
            JsonType::Null => "null",
        }
    }

    /// Whether `value` is of this type; an integer is any number without a fraction
    /// (`1.0` is one), as JSON Schema says.
    fn admits(self, value: &Value) -> bool {
        match (self, value) {
            (JsonType::Object, Value::Object(_))
            | (JsonType::Array, Value::Array(_))
            | (JsonType::String, Value::String(_))
            | (JsonType::Number, Value::Number(_))
            | (JsonType::Boolean, Value::Bool(_))
            | (JsonType::Null, Value::Null) => true,
            (JsonType::Integer, Value::Number(n)) => is_integer(n),
            _ => false,
        }
    }
}

fn is_integer(n: &Number) -> bool {
    n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
}

/// Why a schema (or a function tool's registration) was refused. Each variant says
/// where in the schema, as a JSON pointer (`""` is the schema itself).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// A schema (or a subschema) is not a JSON object.
    #[error("{}: a schema must be a JSON object, got {got}", at(path))]
    NotAnObject {
        /// Where, in the schema.
        path: String,
        /// A quote of what was there.
        got: String,
    },
    /// A keyword this subset does not implement (or a misspelt one).
    #[error(
        "{}: unsupported keyword `{keyword}` (supported: {})",
        at(path),
        KEYWORDS.join(", ")
    )]
    UnsupportedKeyword {
        /// Where, in the schema.
        path: String,
        /// The keyword.
        keyword: String,
    },
    /// A keyword whose value is not of the form it takes.
    #[error("{}: `{keyword}` must be {expected}, got {got}", at(path))]
    InvalidKeyword {
        /// Where, in the schema.
        path: String,
        /// The keyword.
        keyword: String,
        /// What it takes.
        expected: &'static str,
        /// A quote of what was there.
        got: String,
    },
    /// A `type` that names no JSON type.
    #[error(
        "{}: unknown type {name:?} (the types: object, array, string, number, integer, boolean, null)",
        at(path)
    )]
    UnknownType {
        /// Where, in the schema.
        path: String,
        /// The name given.
        name: String,
    },
    /// A keyword that constrains only types the schema's `type` excludes, such as
    /// `minLength` on a number: it could never apply, so it is most likely a mistake.
    #[error(
        "{}: `{keyword}` applies to {applies_to}, but the type is {types}",
        at(path)
    )]
    KeywordDoesNotApply {
        /// Where, in the schema.
        path: String,
        /// The keyword.
        keyword: String,
        /// The types it constrains.
        applies_to: &'static str,
        /// The schema's `type`.
        types: String,
    },
    /// Keywords that contradict each other, so that no value could fit.
    #[error("{}: no value can fit: {why}", at(path))]
    Unsatisfiable {
        /// Where, in the schema.
        path: String,
        /// Which keywords contradict.
        why: String,
    },
    /// A function tool's name that the OpenAI API would refuse: it must be 1 to 64 of
    /// `a-z A-Z 0-9 _ -`.
    #[error("invalid tool name {name:?}: use 1 to 64 of a-z, A-Z, 0-9, `_` and `-`")]
    InvalidToolName {
        /// The name given.
        name: String,
    },
    /// A function tool registered twice under one name.
    #[error("a function tool named `{name}` is already registered")]
    DuplicateTool {
        /// The name.
        name: String,
    },
    /// A function tool's arguments schema whose `type` is not `"object"`: tool
    /// arguments are a JSON object (the OpenAI API requires it).
    #[error("the arguments schema of `{tool}` must have \"type\": \"object\"")]
    ArgumentsNotAnObject {
        /// The tool.
        tool: String,
    },
}

/// "at /properties/x", or "at the schema's root".
fn at(path: &str) -> String {
    if path.is_empty() {
        "at the schema's root".to_owned()
    } else {
        format!("at {path}")
    }
}

/// One way a value does not fit a schema: where (a JSON pointer into the value, `""`
/// for the value itself) and what is wrong. Displayed as `/location/lat: expected a
/// number, got "north"`, or `(root): ...` for the value itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Where in the value, as a JSON pointer (RFC 6901): `/location/lat`, `/tags/0`.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(root)"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)
    }
}

/// A compiled schema: a JSON-Schema subset for tool arguments.
///
/// Keywords: `type` (`object`, `array`, `string`, `number`, `integer`, `boolean`,
/// `null`, or a list of them), `properties`, `required`, `additionalProperties`
/// (`true` or `false` only), `items` (one schema for every item), `enum`, `const`,
/// `minimum` / `maximum` (inclusive), `minLength` / `maxLength` (in characters),
/// `minItems` / `maxItems`, and the annotations `description` and `title`, which are
/// not checked. Any other keyword is refused by [`Schema::new`].
///
/// As in JSON Schema, a keyword constrains only values of the types it is about
/// (`minimum` says nothing of a string), `1.0` is an integer, and `enum` / `const`
/// compare numbers by value (`1 == 1.0`).
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_exec::Schema;
///
/// let schema = Schema::new(json!({
///     "type": "object",
///     "properties": {
///         "location": {
///             "type": "object",
///             "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
///             "required": ["lat", "lon"],
///         },
///     },
///     "required": ["location"],
/// }))?;
/// assert_eq!(schema.check(&json!({"location": {"lat": 38.7, "lon": -9.1}})), Ok(()));
///
/// let violations = schema.check(&json!({"location": {"lat": "north"}})).unwrap_err();
/// let messages: Vec<String> = violations.iter().map(ToString::to_string).collect();
/// assert_eq!(
///     messages,
///     [
///         "/location/lat: expected a number, got \"north\"",
///         "/location/lon: required property missing",
///     ]
/// );
/// # Ok::<(), spool_exec::SchemaError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Schema {
    json: Value,
    root: Node,
}

/// One compiled (sub)schema.
#[derive(Clone, Debug, Default)]
struct Node {
    types: Option<Vec<JsonType>>,
    /// Declared properties, by name.
    properties: Vec<(String, Node)>,
    required: Vec<String>,
    additional: bool,
    items: Option<Box<Node>>,
    one_of_values: Option<Vec<Value>>,
    constant: Option<Value>,
    minimum: Option<Number>,
    maximum: Option<Number>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    min_items: Option<u64>,
    max_items: Option<u64>,
}

impl Schema {
    /// Compiles `json` into a schema.
    ///
    /// # Errors
    /// A [`SchemaError`] naming where and what: a keyword not in the subset
    /// ([`UnsupportedKeyword`](SchemaError::UnsupportedKeyword)), a keyword's value of
    /// the wrong form, an unknown type name, a keyword that cannot apply to the schema's
    /// `type`, or keywords that contradict (`minimum` above `maximum`, a required
    /// property that `additionalProperties: false` forbids).
    pub fn new(json: Value) -> Result<Schema, SchemaError> {
        let root = compile(&json, "")?;
        Ok(Schema { json, root })
    }

    /// The schema as it was written.
    pub fn json(&self) -> &Value {
        &self.json
    }

    /// The schema's top-level `description`, if it has one.
    pub fn description(&self) -> Option<&str> {
        self.json.get("description").and_then(Value::as_str)
    }

    /// Whether the schema's `type` is exactly `"object"` (or `["object"]`).
    pub fn is_object(&self) -> bool {
        self.root.types.as_deref() == Some(&[JsonType::Object])
    }

    /// Checks `value` against the schema.
    ///
    /// # Errors
    /// Every violation, in a fixed order. Within one place: the type first (nothing
    /// else is checked there if it fails), then `const`, `enum` and bounds; then, for
    /// an object, its declared properties by name (depth first), missing required ones
    /// in the order `required` lists them, and undeclared ones by name; for an array,
    /// its items in order.
    pub fn check(&self, value: &Value) -> Result<(), Vec<Violation>> {
        let mut violations = Vec::new();
        let mut path = String::new();
        self.root.check(value, &mut path, &mut violations);
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }
}

/// Compiles the (sub)schema `json`, found at `path` in the whole schema.
fn compile(json: &Value, path: &str) -> Result<Node, SchemaError> {
    let Value::Object(map) = json else {
        return Err(SchemaError::NotAnObject {
            path: path.to_owned(),
            got: quote(json),
        });
    };
    if let Some(keyword) = map.keys().find(|k| !KEYWORDS.contains(&k.as_str())) {
        return Err(SchemaError::UnsupportedKeyword {
            path: path.to_owned(),
            keyword: keyword.clone(),
        });
    }
    let invalid = |keyword: &str, expected: &'static str| SchemaError::InvalidKeyword {
        path: path.to_owned(),
        keyword: keyword.to_owned(),
        expected,
        got: map.get(keyword).map(quote).unwrap_or_default(),
    };
    let mut node = Node {
        additional: true,
        ..Node::default()
    };

    if let Some(types) = map.get("type") {
        node.types = Some(compile_types(types, path, &invalid)?);
    }
    if let Some(properties) = map.get("properties") {
        let Value::Object(properties) = properties else {
            return Err(invalid("properties", "an object of schemas"));
        };
        for (name, schema) in properties {
            let sub = format!("{path}/properties/{}", escape(name));
            node.properties.push((name.clone(), compile(schema, &sub)?));
        }
        // By name, whatever order the map keeps, so that violations come in one order.
        node.properties.sort_by(|a, b| a.0.cmp(&b.0));
    }
    if let Some(required) = map.get("required") {
        let names = required
            .as_array()
            .and_then(|names| names.iter().map(Value::as_str).collect::<Option<Vec<_>>>())
            .ok_or_else(|| invalid("required", "an array of property names"))?;
        for (i, name) in names.iter().enumerate() {
            if names[..i].contains(name) {
                return Err(invalid("required", "an array of distinct property names"));
            }
        }
        node.required = names.into_iter().map(str::to_owned).collect();
    }
    if let Some(additional) = map.get("additionalProperties") {
        node.additional = additional
            .as_bool()
            .ok_or_else(|| invalid("additionalProperties", "true or false"))?;
    }
    if let Some(items) = map.get("items") {
        if !items.is_object() {
            return Err(invalid("items", "one schema (an object) for every item"));
        }
        node.items = Some(Box::new(compile(items, &format!("{path}/items"))?));
    }
    if let Some(values) = map.get("enum") {
        match values.as_array() {
            Some(values) if !values.is_empty() => node.one_of_values = Some(values.clone()),
            _ => return Err(invalid("enum", "a non-empty array of values")),
        }
    }
    node.constant = map.get("const").cloned();
    let number = |keyword: &str| -> Result<Option<Number>, SchemaError> {
        match map.get(keyword) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(Some(n.clone())),
            Some(_) => Err(invalid(keyword, "a number")),
        }
    };
    node.minimum = number("minimum")?;
    node.maximum = number("maximum")?;
    let count = |keyword: &str| -> Result<Option<u64>, SchemaError> {
        match map.get(keyword) {
            None => Ok(None),
            Some(value) => value
                .as_u64()
                .map(Some)
                .ok_or_else(|| invalid(keyword, "a non-negative integer")),
        }
    };
    node.min_length = count("minLength")?;
    node.max_length = count("maxLength")?;
    node.min_items = count("minItems")?;
    node.max_items = count("maxItems")?;
    for keyword in ["description", "title"] {
        if map.get(keyword).is_some_and(|v| !v.is_string()) {
            return Err(invalid(keyword, "a string"));
        }
    }

    check_applies(map, &node, path)?;
    check_satisfiable(&node, path)?;
    Ok(node)
}

/// `type`: one type name, or a non-empty list of distinct ones.
fn compile_types(
    types: &Value,
    path: &str,
    invalid: &dyn Fn(&str, &'static str) -> SchemaError,
) -> Result<Vec<JsonType>, SchemaError> {
    const EXPECTED: &str = "a type name or a non-empty array of distinct type names";
    let names: Vec<&str> = match types {
        Value::String(name) => vec![name],
        Value::Array(names) if !names.is_empty() => names
            .iter()
            .map(Value::as_str)
            .collect::<Option<_>>()
            .ok_or_else(|| invalid("type", EXPECTED))?,
        _ => return Err(invalid("type", EXPECTED)),
    };
    let mut parsed = Vec::with_capacity(names.len());
    for name in names {
        let ty = JsonType::parse(name).ok_or_else(|| SchemaError::UnknownType {
            path: path.to_owned(),
            name: name.to_owned(),
        })?;
        if parsed.contains(&ty) {
            return Err(invalid("type", EXPECTED));
        }
        parsed.push(ty);
    }
    Ok(parsed)
}

/// Refuses a keyword that constrains only types the schema's `type` excludes.
fn check_applies(map: &Map<String, Value>, node: &Node, path: &str) -> Result<(), SchemaError> {
    let Some(types) = &node.types else {
        return Ok(());
    };
    let groups: [(&[&str], &[JsonType], &'static str); 4] = [
        (
            &["properties", "required", "additionalProperties"],
            &[JsonType::Object],
            "objects",
        ),
        (
            &["items", "minItems", "maxItems"],
            &[JsonType::Array],
            "arrays",
        ),
        (&["minLength", "maxLength"], &[JsonType::String], "strings"),
        (
            &["minimum", "maximum"],
            &[JsonType::Number, JsonType::Integer],
            "numbers",
        ),
    ];
    for (keywords, applies, applies_to) in groups {
        if types.iter().any(|t| applies.contains(t)) {
            continue;
        }
        if let Some(keyword) = keywords.iter().find(|k| map.contains_key(**k)) {
            return Err(SchemaError::KeywordDoesNotApply {
                path: path.to_owned(),
                keyword: (*keyword).to_owned(),
                applies_to,
                types: types
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
    }
    Ok(())
}

/// Refuses keywords that contradict each other.
fn check_satisfiable(node: &Node, path: &str) -> Result<(), SchemaError> {
    let unsatisfiable = |why: String| SchemaError::Unsatisfiable {
        path: path.to_owned(),
        why,
    };
    if let (Some(min), Some(max)) = (&node.minimum, &node.maximum) {
        if compare(min, max) == std::cmp::Ordering::Greater {
            return Err(unsatisfiable(format!(
                "minimum {min} is above maximum {max}"
            )));
        }
    }
    for (min, max, what) in [
        (node.min_length, node.max_length, "Length"),
        (node.min_items, node.max_items, "Items"),
    ] {
        if let (Some(min), Some(max)) = (min, max) {
            if min > max {
                return Err(unsatisfiable(format!(
                    "min{what} {min} is above max{what} {max}"
                )));
            }
        }
    }
    if !node.additional {
        if let Some(name) = node
            .required
            .iter()
            .find(|name| !node.properties.iter().any(|(p, _)| p == *name))
        {
            return Err(unsatisfiable(format!(
                "`{name}` is required but not among the properties, and additionalProperties is false"
            )));
        }
    }
    Ok(())
}

impl Node {
    /// Checks `value`, found at `path` (a JSON pointer, extended and restored as the
    /// check goes down), pushing what does not fit onto `out`.
    fn check(&self, value: &Value, path: &mut String, out: &mut Vec<Violation>) {
        let mut report = |path: &str, message: String| {
            out.push(Violation {
                path: path.to_owned(),
                message,
            });
        };
        if let Some(types) = &self.types {
            if !types.iter().any(|t| t.admits(value)) {
                report(
                    path,
                    format!("expected {}, got {}", spoken_types(types), quote(value)),
                );
                return;
            }
        }
        if let Some(constant) = &self.constant {
            if !json_equal(constant, value) {
                report(
                    path,
                    format!("expected {}, got {}", quote(constant), quote(value)),
                );
            }
        }
        if let Some(values) = &self.one_of_values {
            if !values.iter().any(|v| json_equal(v, value)) {
                let list: Vec<String> = values.iter().map(quote).collect();
                report(
                    path,
                    format!("expected one of {}, got {}", list.join(", "), quote(value)),
                );
            }
        }
        match value {
            Value::Number(n) => {
                if let Some(min) = &self.minimum {
                    if compare(n, min) == std::cmp::Ordering::Less {
                        report(path, format!("expected at least {min}, got {n}"));
                    }
                }
                if let Some(max) = &self.maximum {
                    if compare(n, max) == std::cmp::Ordering::Greater {
                        report(path, format!("expected at most {max}, got {n}"));
                    }
                }
            }
            Value::String(s) => {
                let len = s.chars().count() as u64;
                if let Some(min) = self.min_length {
                    if len < min {
                        report(
                            path,
                            format!("expected at least {}, got {len}", plural(min, "character")),
                        );
                    }
                }
                if let Some(max) = self.max_length {
                    if len > max {
                        report(
                            path,
                            format!("expected at most {}, got {len}", plural(max, "character")),
                        );
                    }
                }
            }
            Value::Array(items) => {
                let len = items.len() as u64;
                if let Some(min) = self.min_items {
                    if len < min {
                        report(
                            path,
                            format!("expected at least {}, got {len}", plural(min, "item")),
                        );
                    }
                }
                if let Some(max) = self.max_items {
                    if len > max {
                        report(
                            path,
                            format!("expected at most {}, got {len}", plural(max, "item")),
                        );
                    }
                }
                if let Some(schema) = &self.items {
                    for (i, item) in items.iter().enumerate() {
                        let restore = path.len();
                        path.push('/');
                        path.push_str(&i.to_string());
                        schema.check(item, path, out);
                        path.truncate(restore);
                    }
                }
            }
            Value::Object(map) => self.check_object(map, path, out),
            Value::Null | Value::Bool(_) => {}
        }
    }

    fn check_object(&self, map: &Map<String, Value>, path: &mut String, out: &mut Vec<Violation>) {
        let restore = path.len();
        for (name, schema) in &self.properties {
            if let Some(value) = map.get(name) {
                path.push('/');
                path.push_str(&escape(name));
                schema.check(value, path, out);
                path.truncate(restore);
            }
        }
        for name in &self.required {
            if !map.contains_key(name) {
                out.push(Violation {
                    path: format!("{path}/{}", escape(name)),
                    message: "required property missing".to_owned(),
                });
            }
        }
        if !self.additional {
            let allowed: Vec<&str> = self.properties.iter().map(|(p, _)| p.as_str()).collect();
            let mut names: Vec<&String> = map.keys().collect();
            names.sort();
            for name in names {
                if !allowed.contains(&name.as_str()) {
                    let message = if allowed.is_empty() {
                        "unexpected property (none are allowed)".to_owned()
                    } else {
                        format!("unexpected property (allowed: {})", allowed.join(", "))
                    };
                    out.push(Violation {
                        path: format!("{path}/{}", escape(name)),
                        message,
                    });
                }
            }
        }
    }
}

/// "a string", "a string or null", "an object, an array or null".
fn spoken_types(types: &[JsonType]) -> String {
    match types {
        [] => String::new(),
        [one] => one.spoken().to_owned(),
        [init @ .., last] => {
            let init: Vec<&str> = init.iter().map(|t| t.spoken()).collect();
            format!("{} or {}", init.join(", "), last.spoken())
        }
    }
}

/// "1 character", "3 items".
fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A JSON pointer token: `~` as `~0`, `/` as `~1`.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// `value` as JSON, cut to [`QUOTE_CHARS`] characters with `…` if longer.
fn quote(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= QUOTE_CHARS {
        text
    } else {
        let mut cut: String = text.chars().take(QUOTE_CHARS).collect();
        cut.push('…');
        cut
    }
}

/// Compares two numbers by value: exactly when both are integers, as floats otherwise.
fn compare(a: &Number, b: &Number) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a.as_i64(), b.as_i64(), a.as_u64(), b.as_u64()) {
        (Some(a), Some(b), ..) => a.cmp(&b),
        (_, _, Some(a), Some(b)) => a.cmp(&b),
        // One is a u64 above i64::MAX and the other a negative i64.
        (Some(_), None, None, Some(_)) => Ordering::Less,
        (None, Some(_), Some(_), None) => Ordering::Greater,
        _ => {
            let (a, b) = (
                a.as_f64().unwrap_or(f64::NAN),
                b.as_f64().unwrap_or(f64::NAN),
            );
            a.partial_cmp(&b).unwrap_or(Ordering::Equal)
        }
    }
}

/// JSON Schema's equality: numbers by value (`1 == 1.0`), arrays item by item,
/// objects key by key, the rest as serde_json compares them.
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(a), Value::Number(b)) => compare(a, b) == std::cmp::Ordering::Equal,
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len()
                && a.iter()
                    .all(|(k, v)| b.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_compare_by_value_across_representations() {
        use std::cmp::Ordering;
        let n = |v: Value| match v {
            Value::Number(n) => n,
            _ => unreachable!("a number"),
        };
        assert_eq!(compare(&n(json!(1)), &n(json!(1.0))), Ordering::Equal);
        assert_eq!(compare(&n(json!(-1)), &n(json!(u64::MAX))), Ordering::Less);
        assert_eq!(
            compare(&n(json!(u64::MAX)), &n(json!(-1))),
            Ordering::Greater
        );
        assert_eq!(compare(&n(json!(2.5)), &n(json!(2))), Ordering::Greater);
        assert!(json_equal(&json!([1, {"a": 2.0}]), &json!([1.0, {"a": 2}])));
        assert!(!json_equal(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
    }

    #[test]
    fn quotes_are_cut_at_60_characters() {
        let long = Value::String("x".repeat(100));
        let quoted = quote(&long);
        assert_eq!(quoted.chars().count(), QUOTE_CHARS + 1);
        assert!(quoted.ends_with('…'));
        assert_eq!(quote(&json!("short")), "\"short\"");
    }

    #[test]
    fn pointer_tokens_are_escaped() {
        assert_eq!(escape("a/b~c"), "a~1b~0c");
    }
}
