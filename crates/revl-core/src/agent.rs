//! What revl records of a coding agent's calls (docs/agents.md): the origin of a step (the
//! agent, its session id, its turn, the tool-use id).

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};

/// The longest id an origin holds (agents' ids are UUIDs or shorter).
const ID_MAX: usize = 256;

/// Which agent call made a step: recorded in the step's detail (`origin`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Origin {
    /// `claude` or `codex`.
    pub agent: String,
    /// The agent's own session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_session: Option<String>,
    /// The agent's turn: Claude Code's prompt id, Codex's turn id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
    /// The tool call's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_use: Option<String>,
    /// The command as the agent gave it (what the step's label shows; its argv is the
    /// shell revl ran it with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

impl Origin {
    /// From its JSON form (`revl exec --origin JSON`): an object with `agent` and the optional
    /// ids, each a short string without control characters.
    pub fn parse(s: &str) -> Result<Origin> {
        let bad = |why: String| {
            Error::bad_args(
                format!("the step origin {why}"),
                r#"give --origin '{"agent": "claude", "agentSession": ID, "turn": ID, "toolUse": ID}' (docs/agents.md)"#,
            )
        };
        let o: Origin = serde_json::from_str(s).map_err(|e| bad(format!("is not valid ({e})")))?;
        o.checked()
    }

    /// This origin, if it may be recorded: an agent named, each id a short string without
    /// control characters, a command up to 1 MiB.
    pub fn checked(self) -> Result<Origin> {
        let o = self;
        let bad = |why: String| {
            Error::bad_args(
                format!("the step origin {why}"),
                r#"give --origin '{"agent": "claude", "agentSession": ID, "turn": ID, "toolUse": ID}' (docs/agents.md)"#,
            )
        };
        let ids = [
            Some(&o.agent),
            o.agent_session.as_ref(),
            o.turn.as_ref(),
            o.tool_use.as_ref(),
        ];
        if o.command.as_ref().is_some_and(|c| c.len() > 1 << 20) {
            return Err(bad("holds a command over 1 MiB".into()));
        }
        if o.agent.is_empty() {
            return Err(bad("names no agent".into()));
        }
        for id in ids.into_iter().flatten() {
            if id.len() > ID_MAX || id.chars().any(char::is_control) {
                return Err(bad(format!(
                    "holds an id longer than {ID_MAX} bytes or with control characters"
                )));
            }
        }
        Ok(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_parses_and_refuses_junk() {
        let o = Origin::parse(r#"{"agent":"claude","turn":"p1","toolUse":"t"}"#).unwrap();
        assert_eq!(o.turn.as_deref(), Some("p1"));
        for bad in [
            "[]",
            r#"{"agent":""}"#,
            r#"{"agent":"x","other":1}"#,
            r#"{"agent":"x","turn":"a\nb"}"#,
        ] {
            assert!(Origin::parse(bad).is_err(), "{bad}");
        }
    }
}
