//! JSON Schema for tool arguments and task inputs, checked by the maintained
//! [`jsonschema`] crate: a schema is compiled (and itself checked against its draft's
//! meta-schema) once by [`Schema::new`], then [`Schema::check`]ed against each value,
//! listing every violation with its JSON path.

use std::cmp::Ordering;
use std::fmt;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{JsonType, Retrieve, Uri, ValidationError};
use serde_json::Value;

/// The longest violation message in characters: longer ones (which quote a large
/// value) say "value" instead of the quote.
const MESSAGE_CHARS: usize = 200;

/// Why a schema (or a function tool's registration) was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// The schema is not valid JSON Schema: it does not fit its draft's meta-schema, a
    /// `pattern` is not a regular expression, a `$ref` leads nowhere in the schema...
    #[error("{}: {message}", at(path))]
    Invalid {
        /// Where, in the schema, as a JSON pointer (`""` is the schema itself).
        path: String,
        /// What is wrong there, as the `jsonschema` crate says it.
        message: String,
    },
    /// A `$ref` to a document outside the schema: it is never fetched. (A `$schema`
    /// naming no draft is [`SchemaError::Invalid`], and is not fetched either.)
    #[error(
        "`{uri}` is outside the schema and is not fetched: put what it refers to under \
         `$defs` and refer to it as `#/$defs/...`"
    )]
    ExternalReference {
        /// The reference.
        uri: String,
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
/// for the value itself) and what is wrong, in words. Displayed as `/location/lat:
/// expected a number, got "north"`, or `(root): ...` for the value itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Where in the value, as a JSON pointer (RFC 6901): `/location/lat`, `/tags/0`. A
    /// missing required property or an unexpected one is reported at its object.
    pub path: String,
    /// What is wrong there, in words: `expected a string, got 7`, `must not be
    /// blank`, `must be at least 3 characters long`, `required property is missing`
    /// (see [`Schema::check`]).
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

/// A compiled JSON Schema, checked by the maintained [`jsonschema`] crate.
///
/// - **Draft**: the one the schema's `$schema` names (draft 4, 6, 7, 2019-09 or
///   2020-12); 2020-12 when it names none, as OpenAI's tool definitions assume.
/// - **Formats are asserted**: a `format` the crate knows (`date-time`, `date`, `email`,
///   `uuid`, `ipv4`, `uri`, ...) is checked, whatever the draft, so that a tool is not
///   called with `"tomorrow"` as a `date`; a format it does not know is an annotation.
/// - **Nothing is fetched**: a `$ref` may point inside the schema (`#/$defs/x`, an
///   `$anchor`, an embedded `$id`) and to the drafts' own meta-schemas, which the crate
///   carries; any other (`https://...`, `file:...`, `other.json`) is refused by
///   [`Schema::new`] with [`SchemaError::ExternalReference`], never retrieved. The crate
///   is built without its HTTP and file features, and the retriever given to it refuses
///   every URI on top of that.
/// - **Keywords JSON Schema does not define** (`x-vendor`, a misspelt `maxLenght`) are
///   ignored, as the drafts say: a schema is not refused for them.
/// - **Every violation** is listed by [`Schema::check`], each with its path in the value
///   and what is wrong in words (not the schema's keywords), sorted by path and then
///   message.
///
/// # Example
/// ```
/// use serde_json::json;
/// use spool_exec::Schema;
///
/// let schema = Schema::new(json!({
///     "type": "object",
///     "properties": {
///         "location": {"$ref": "#/$defs/point"},
///         "units": {"enum": ["celsius", "fahrenheit"]},
///     },
///     "required": ["location"],
///     "$defs": {
///         "point": {
///             "type": "object",
///             "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
///             "required": ["lat", "lon"],
///         },
///     },
/// }))?;
/// assert_eq!(schema.check(&json!({"location": {"lat": 38.7, "lon": -9.1}})), Ok(()));
///
/// let violations = schema
///     .check(&json!({"location": {"lat": "north"}, "units": "kelvin"}))
///     .unwrap_err();
/// let messages: Vec<String> = violations.iter().map(ToString::to_string).collect();
/// assert_eq!(
///     messages,
///     [
///         "/location/lat: expected a number, got \"north\"",
///         "/location/lon: required property is missing",
///         "/units: \"kelvin\" is not one of \"celsius\" or \"fahrenheit\"",
///     ]
/// );
/// # Ok::<(), spool_exec::SchemaError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Schema {
    json: Value,
    validator: jsonschema::Validator,
}

impl Schema {
    /// Compiles `json` into a schema.
    ///
    /// # Errors
    /// [`SchemaError::Invalid`] if `json` is not valid JSON Schema for its draft (the
    /// first problem found, with its path in the schema), and
    /// [`SchemaError::ExternalReference`] for a reference outside the schema. Keywords
    /// JSON Schema does not define are allowed and ignored, as the drafts say.
    pub fn new(json: Value) -> Result<Schema, SchemaError> {
        let validator = jsonschema::options()
            .with_retriever(NoFetching)
            .should_validate_formats(true)
            .build(&json)
            .map_err(schema_error)?;
        Ok(Schema { json, validator })
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
        match self.json.get("type") {
            Some(Value::String(name)) => name == "object",
            Some(Value::Array(names)) => names.len() == 1 && names[0] == "object",
            _ => false,
        }
    }

    /// Checks `value` against the schema.
    ///
    /// # Errors
    /// Every violation, sorted by path (token by token, array indexes as numbers) and
    /// then by message, so that the list does not depend on the crate's walk. Each says
    /// what is wrong in words, the value quoted (cut at 60 characters) where it helps:
    ///
    /// | keyword | message |
    /// |---|---|
    /// | `type` | `expected a string, got 7` (`expected a string or null, ...`) |
    /// | `required` | `required property is missing` (at the property's path) |
    /// | `additionalProperties` | `property is not allowed` (at the property's path) |
    /// | `pattern` `\S` (or `\S+`, `.*\S.*`, `[^\s]`) | `must not be blank` |
    /// | `pattern` | `must match the pattern ^[a-z]+$, got "A1"` |
    /// | `minLength` / `maxLength` | `must not be empty`, `must be at least 3 characters long`, `must be at most 64 characters long` |
    /// | `minimum` / `maximum` | `must be at least 1, got 0`, `must be at most 10, got 11` |
    /// | `exclusiveMinimum` / `exclusiveMaximum` | `must be greater than 0, got 0`, `must be less than 1, got 1` |
    /// | `minItems` / `maxItems` | `must have at least 1 item`, `must have at most 5 items` |
    /// | `const` | `must be "yes"` |
    /// | others | the `jsonschema` crate's message (`"kelvin" is not one of "celsius" or "fahrenheit"`) |
    pub fn check(&self, value: &Value) -> Result<(), Vec<Violation>> {
        let mut violations: Vec<Violation> = Vec::new();
        for error in self.validator.iter_errors(value) {
            let at = error.instance_path().to_string();
            // A missing or an unexpected property is reported at the property's own
            // path (the crate puts it at its object's), so a client sees which one.
            match error.kind() {
                ValidationErrorKind::Required { property } => {
                    let name = property
                        .as_str()
                        .map_or_else(|| property.to_string(), str::to_owned);
                    violations.push(Violation {
                        path: child_path(&at, &name),
                        message: "required property is missing".to_owned(),
                    });
                }
                ValidationErrorKind::AdditionalProperties { unexpected } => {
                    for name in unexpected {
                        violations.push(Violation {
                            path: child_path(&at, name),
                            message: "property is not allowed".to_owned(),
                        });
                    }
                }
                _ => violations.push(Violation {
                    path: at,
                    message: plain(&error),
                }),
            }
        }
        if violations.is_empty() {
            return Ok(());
        }
        violations.sort_by(|a, b| compare_paths(&a.path, &b.path).then(a.message.cmp(&b.message)));
        violations.dedup();
        Err(violations)
    }
}

/// The JSON pointer of property `name` of the object at `parent`.
fn child_path(parent: &str, name: &str) -> String {
    let escaped = name.replace('~', "~0").replace('/', "~1");
    format!("{parent}/{escaped}")
}

/// The longest quote of a value in a message, in characters.
const QUOTE_CHARS: usize = 60;

/// `value` as JSON, cut at [`QUOTE_CHARS`] characters.
fn quote(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= QUOTE_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(QUOTE_CHARS).collect();
    cut.push('…');
    cut
}

/// "a string", "an object", "an integer".
fn a_type(kind: JsonType) -> String {
    let name = kind.as_str();
    let article = if matches!(kind, JsonType::Array | JsonType::Integer | JsonType::Object) {
        "an"
    } else {
        "a"
    };
    match kind {
        JsonType::Null => "null".to_owned(),
        _ => format!("{article} {name}"),
    }
}

/// Patterns that say only "not blank": some character that is not white space.
const NOT_BLANK: [&str; 6] = [r"\S", r"\S+", r".*\S.*", r"^.*\S.*$", r"[^\s]", r"[^\s]+"];

/// "s" for a count other than one.
fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// What is wrong, in words, for the keywords a person meets most (see
/// [`Schema::check`]); the crate's message for the others.
fn plain(error: &ValidationError<'_>) -> String {
    let value = error.instance();
    let got = quote(value);
    match error.kind() {
        ValidationErrorKind::Type { kind } => {
            let expected: Vec<String> = match kind {
                TypeKind::Single(one) => vec![a_type(*one)],
                // `null` last: "a string or null".
                TypeKind::Multiple(set) => set
                    .iter()
                    .filter(|t| *t != JsonType::Null)
                    .chain(set.iter().filter(|t| *t == JsonType::Null))
                    .map(a_type)
                    .collect(),
            };
            let expected = match expected.split_last() {
                Some((last, [])) => last.clone(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => "another type".to_owned(),
            };
            format!("expected {expected}, got {got}")
        }
        ValidationErrorKind::Pattern { pattern } => {
            let blank = value.as_str().is_some_and(|s| s.trim().is_empty());
            if blank && NOT_BLANK.contains(&pattern.as_str()) {
                "must not be blank".to_owned()
            } else {
                format!("must match the pattern {pattern}, got {got}")
            }
        }
        ValidationErrorKind::MinLength { limit: 1 } => "must not be empty".to_owned(),
        ValidationErrorKind::MinLength { limit } => {
            format!("must be at least {limit} character{} long", plural(*limit))
        }
        ValidationErrorKind::MaxLength { limit } => {
            format!("must be at most {limit} character{} long", plural(*limit))
        }
        ValidationErrorKind::Minimum { limit } => format!("must be at least {limit}, got {got}"),
        ValidationErrorKind::Maximum { limit } => format!("must be at most {limit}, got {got}"),
        ValidationErrorKind::ExclusiveMinimum { limit } => {
            format!("must be greater than {limit}, got {got}")
        }
        ValidationErrorKind::ExclusiveMaximum { limit } => {
            format!("must be less than {limit}, got {got}")
        }
        ValidationErrorKind::MinItems { limit } => {
            format!("must have at least {limit} item{}", plural(*limit))
        }
        ValidationErrorKind::MaxItems { limit } => {
            format!("must have at most {limit} item{}", plural(*limit))
        }
        ValidationErrorKind::Constant { expected_value } => {
            format!("must be {}", quote(expected_value))
        }
        _ => message(error),
    }
}

/// The crate's message for `error`, with "value" for the value it quotes if the quote
/// would make it longer than [`MESSAGE_CHARS`].
fn message(error: &ValidationError<'_>) -> String {
    let full = error.to_string();
    if full.chars().count() <= MESSAGE_CHARS {
        return full;
    }
    let masked = error.masked().to_string();
    if masked.chars().count() <= MESSAGE_CHARS {
        masked
    } else {
        let mut cut: String = masked.chars().take(MESSAGE_CHARS).collect();
        cut.push('…');
        cut
    }
}

/// A schema's compile error as a [`SchemaError`].
fn schema_error(error: ValidationError<'static>) -> SchemaError {
    if let ValidationErrorKind::Referencing(jsonschema::ReferencingError::Unretrievable {
        uri,
        ..
    }) = error.kind()
    {
        return SchemaError::ExternalReference { uri: uri.clone() };
    }
    SchemaError::Invalid {
        path: error.instance_path().to_string(),
        message: message(&error),
    }
}

/// The retriever given to the crate: it refuses every URI, so nothing outside the
/// schema is ever fetched (the drafts' meta-schemas are built into the crate).
struct NoFetching;

impl Retrieve for NoFetching {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!("{uri} is not fetched").into())
    }
}

/// Orders two JSON pointers token by token: array indexes by number (`/2` before
/// `/10`), other tokens as text, a pointer before the pointers below it.
fn compare_paths(a: &str, b: &str) -> Ordering {
    let mut a = a.split('/');
    let mut b = b.split('/');
    loop {
        match (a.next(), b.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) => {
                let order = match (x.parse::<u64>(), y.parse::<u64>()) {
                    (Ok(x), Ok(y)) => x.cmp(&y),
                    _ => x.cmp(y),
                };
                if order != Ordering::Equal {
                    return order;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_order_by_token_with_indexes_as_numbers() {
        let mut paths = vec!["/b", "/a/10", "", "/a/2/x", "/a/2", "/a~1b", "/10", "/9"];
        paths.sort_by(|a, b| compare_paths(a, b));
        assert_eq!(
            paths,
            ["", "/9", "/10", "/a/2", "/a/2/x", "/a/10", "/a~1b", "/b"]
        );
    }

    #[test]
    fn a_long_value_is_quoted_cut() {
        let schema = Schema::new(json!({"type": "number"})).expect("compiles");
        let long = json!("x".repeat(300));
        assert_eq!(
            schema.check(&long),
            Err(vec![Violation {
                path: String::new(),
                message: format!("expected a number, got \"{}…", "x".repeat(59)),
            }])
        );
        let short = schema.check(&json!("x")).expect_err("a string");
        assert_eq!(short[0].message, "expected a number, got \"x\"");
        // A keyword without words of its own: the crate's message, "value" for a long
        // quote.
        let one_of = Schema::new(json!({"enum": ["a", "b"]})).expect("compiles");
        let long = one_of.check(&json!("y".repeat(300))).expect_err("not one");
        assert_eq!(long[0].message, "value is not one of \"a\" or \"b\"");
    }

    /// Each keyword a person meets most says what is wrong in words, at the JSON
    /// pointer of the field.
    #[test]
    fn violations_say_what_is_wrong_in_words() {
        let schema = Schema::new(json!({
            "type": "object",
            "properties": {
                "prompt": {"type": "string", "pattern": "\\S"},
                "name": {"type": "string", "pattern": "^[a-z]+$", "minLength": 3, "maxLength": 5},
                "title": {"type": "string", "minLength": 1},
                "note": {"type": ["string", "null"]},
                "n": {"type": "integer", "minimum": 1, "maximum": 10},
                "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                "tags": {"type": "array", "minItems": 1, "maxItems": 2},
                "ok": {"const": "yes"},
                "meta": {"type": "object"},
            },
            "required": ["prompt", "id"],
            "additionalProperties": false,
        }))
        .expect("compiles");
        let bad = json!({
            "prompt": "   ",
            "name": "A1bcdef",
            "title": "",
            "note": 7,
            "n": 0,
            "ratio": 1,
            "tags": [],
            "ok": "no",
            "meta": [1],
            "extra": true,
        });
        let said: Vec<String> = schema
            .check(&bad)
            .expect_err("does not fit")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            said,
            [
                "/extra: property is not allowed",
                "/id: required property is missing",
                "/meta: expected an object, got [1]",
                "/n: must be at least 1, got 0",
                "/name: must be at most 5 characters long",
                "/name: must match the pattern ^[a-z]+$, got \"A1bcdef\"",
                "/note: expected a string or null, got 7",
                "/ok: must be \"yes\"",
                "/prompt: must not be blank",
                "/ratio: must be less than 1, got 1",
                "/tags: must have at least 1 item",
                "/title: must not be empty",
            ]
        );
        let more: Vec<String> = schema
            .check(&json!({"prompt": 7, "id": 1, "name": "ab", "n": 11, "ratio": 0, "tags": [1, 2, 3]}))
            .expect_err("does not fit")
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            more,
            [
                // Required, and not among the properties allowed.
                "/id: property is not allowed",
                "/n: must be at most 10, got 11",
                "/name: must be at least 3 characters long",
                "/prompt: expected a string, got 7",
                "/ratio: must be greater than 0, got 0",
                "/tags: must have at most 2 items",
            ]
        );
    }

    #[test]
    fn nothing_outside_the_schema_is_fetched() {
        for (reference, uri) in [
            (
                "https://example.com/point.json",
                "https://example.com/point.json",
            ),
            ("file:///etc/passwd", "file:///etc/passwd"),
            ("point.json", "point.json"),
        ] {
            let schema = json!({"properties": {"p": {"$ref": reference}}});
            assert_eq!(
                Schema::new(schema).map(|_| ()),
                Err(SchemaError::ExternalReference {
                    uri: uri.to_owned()
                }),
                "{reference}"
            );
        }
        // Nor a meta-schema that is not one of the drafts': the schema is refused.
        let custom = json!({"$schema": "https://example.com/my-meta", "type": "object"});
        assert_eq!(
            Schema::new(custom).map(|_| ()),
            Err(SchemaError::Invalid {
                path: String::new(),
                message: "Unknown meta-schema: 'https://example.com/my-meta'. Custom \
                          meta-schemas must be registered in the registry before use"
                    .to_owned()
            })
        );
    }
}
