//! The shapes of the conversation the agent and the scripted LLM share: how the system
//! prompt names the agent, and how a tool's answer is written into a tool message. The
//! agent writes them; the scripted LLM reads them back.

use serde_json::{Value, json};

/// How the system prompt starts; the agent's name follows, up to the first `.`.
const SYSTEM_PREFIX: &str = "You are ";

/// The system prompt of the agent `name`.
pub(crate) fn system_prompt(name: &str) -> String {
    // Short: every request carries it, and every snapshot every request in flight.
    format!("{SYSTEM_PREFIX}{name}. Use the tools, then answer in one sentence.")
}

/// The agent's name in a system prompt of [`system_prompt`]'s form.
pub(crate) fn agent_named_in(system: &str) -> Option<&str> {
    system.strip_prefix(SYSTEM_PREFIX)?.split('.').next()
}

/// What a tool's answer becomes in the conversation: a string as it is, any other value
/// as JSON, an error as `{"error": message}`.
pub(crate) fn tool_message_content(result: Result<Value, String>) -> String {
    match result {
        Ok(Value::String(text)) => text,
        Ok(value) => value.to_string(),
        Err(error) => json!({ "error": error }).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_prompt_names_the_agent() {
        assert_eq!(agent_named_in(&system_prompt("agent-17")), Some("agent-17"));
        assert_eq!(agent_named_in("You were"), None);
    }

    #[test]
    fn tool_answers_become_message_text() {
        assert_eq!(tool_message_content(Ok(json!("plain"))), "plain");
        assert_eq!(tool_message_content(Ok(json!({"a": 1}))), "{\"a\":1}");
        assert_eq!(
            tool_message_content(Err("down".to_owned())),
            "{\"error\":\"down\"}"
        );
    }
}
