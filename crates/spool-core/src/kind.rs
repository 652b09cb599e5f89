//! Request kinds: what a request asks for, and so which executor serves it.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a request asks for: an LLM completion, a named tool, a human confirmation, or
/// an embedder's own kind. Drivers route each kind to one executor.
///
/// The text form is `llm`, `confirm`, `tool:<name>`, or any other name for an
/// embedder's own kind. Kinds built from `&'static str` cost nothing to clone.
///
/// # Example
/// ```
/// use spool_core::Kind;
///
/// assert_eq!(Kind::tool("ls").to_string(), "tool:ls");
/// assert_eq!("tool:ls".parse::<Kind>().unwrap(), Kind::tool("ls"));
/// assert_eq!("llm".parse::<Kind>().unwrap(), Kind::Llm);
/// assert_eq!(Kind::custom("search").to_string(), "search");
/// assert!("tool:".parse::<Kind>().is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// An LLM completion.
    Llm,
    /// A question for a human, answered by the embedder.
    Confirm,
    /// A tool, by name.
    Tool(Cow<'static, str>),
    /// An embedder's own kind, by name.
    Custom(Cow<'static, str>),
}

impl Kind {
    /// The kind of the tool called `name`: a `&'static str` (kept as it is) or a
    /// `String` known only at run time.
    pub fn tool(name: impl Into<Cow<'static, str>>) -> Kind {
        Kind::Tool(name.into())
    }

    /// An embedder's own kind. The names `llm`, `confirm` and `tool:<name>` give the
    /// built-in kinds, so a kind has one spelling.
    pub fn custom(name: impl Into<Cow<'static, str>>) -> Kind {
        let name = name.into();
        match name.as_ref() {
            "llm" => Kind::Llm,
            "confirm" => Kind::Confirm,
            s if s.starts_with("tool:") && s.len() > 5 => Kind::Tool(Cow::Owned(s[5..].to_owned())),
            _ => Kind::Custom(name),
        }
    }

    /// The tool's name, for a tool kind.
    pub fn tool_name(&self) -> Option<&str> {
        match self {
            Kind::Tool(name) => Some(name),
            _ => None,
        }
    }
}

/// Why a text is not a request kind.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not a request kind: {why}")]
pub struct KindError {
    text: String,
    why: &'static str,
}

impl FromStr for Kind {
    type Err = KindError;

    fn from_str(s: &str) -> Result<Kind, KindError> {
        let fail = |why| KindError {
            text: s.to_owned(),
            why,
        };
        if s.is_empty() {
            return Err(fail("a kind needs a name"));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(fail("a kind has no white space or control characters"));
        }
        if let Some(tool) = s.strip_prefix("tool:") {
            if tool.is_empty() {
                return Err(fail("`tool:` needs a tool name after the colon"));
            }
            return Ok(Kind::Tool(Cow::Owned(tool.to_owned())));
        }
        Ok(Kind::custom(Cow::Owned(s.to_owned())))
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Llm => f.write_str("llm"),
            Kind::Confirm => f.write_str("confirm"),
            Kind::Tool(name) => write!(f, "tool:{name}"),
            Kind::Custom(name) => f.write_str(name),
        }
    }
}

impl Serialize for Kind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Kind, D::Error> {
        let text = Cow::<'de, str>::deserialize(d)?;
        Ok(text
            .parse()
            .unwrap_or_else(|_| Kind::custom(text.into_owned())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips() {
        for text in ["llm", "confirm", "tool:ls", "tool:a:b", "search"] {
            let kind: Kind = text.parse().expect("a valid kind");
            assert_eq!(kind.to_string(), text);
        }
    }

    #[test]
    fn one_spelling_per_kind() {
        assert_eq!(Kind::custom("llm"), Kind::Llm);
        assert_eq!(Kind::custom("tool:ls"), Kind::tool("ls"));
        assert_eq!(Kind::custom("tool:"), Kind::Custom("tool:".into()));
    }

    #[test]
    fn bad_kinds_say_why() {
        let err = |s: &str| s.parse::<Kind>().expect_err("invalid").to_string();
        assert_eq!(err(""), "`` is not a request kind: a kind needs a name");
        assert_eq!(
            err("tool:"),
            "`tool:` is not a request kind: `tool:` needs a tool name after the colon"
        );
        assert_eq!(
            err("my kind"),
            "`my kind` is not a request kind: a kind has no white space or control characters"
        );
    }
}
