//! JSON Schema for tool arguments and task inputs, checked by the maintained
//! [`jsonschema`] crate: a schema is compiled (and itself checked against its draft's
//! meta-schema) once by [`Schema::new`], then [`Schema::check`]ed against each value,
//! listing every violation with its JSON path.

use std::cmp::Ordering;
use std::fmt;

use jsonschema::error::ValidationErrorKind;
use jsonschema::{Retrieve, Uri, ValidationError};
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
/// for the value itself) and what is wrong. Displayed as `/location/lat: "north" is not
/// of type "number"`, or `(root): ...` for the value itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Where in the value, as a JSON pointer (RFC 6901): `/location/lat`, `/tags/0`. A
    /// missing required property or an unexpected one is reported at its object.
    pub path: String,
    /// What is wrong there, as the `jsonschema` crate says it.
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
///   and the crate's message, sorted by path and then message.
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
///         "/location/lat: \"north\" is not of type \"number\"",
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
    /// then by message, so that the list does not depend on the crate's walk.
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
                    message: message(&error),
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
    fn a_long_message_says_value_instead_of_quoting_it() {
        let schema = Schema::new(json!({"type": "number"})).expect("compiles");
        let long = json!("x".repeat(300));
        assert_eq!(
            schema.check(&long),
            Err(vec![Violation {
                path: String::new(),
                message: "value is not of type \"number\"".to_owned(),
            }])
        );
        let short = schema.check(&json!("x")).expect_err("a string");
        assert_eq!(short[0].message, "\"x\" is not of type \"number\"");
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
