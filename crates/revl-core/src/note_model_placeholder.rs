//! Placeholder for `note-model` (SPEC 8) so that the MCP server builds before the real verb
//! lands. The real `Session::note_model` replaces this file: delete it (and its `mod` line
//! in lib.rs) when merging.

use crate::error::{Code, Error, Result};
use crate::session::Session;
use serde_json::Value;

impl Session {
    /// `note-model`: not built in this checkout yet; always refuses, records nothing.
    pub fn note_model(&mut self, args: &Value) -> Result<Value> {
        let _ = args;
        self.require_live()?;
        Err(Error::new(
            Code::Usage,
            "note-model is not available in this build of revl",
            "upgrade revl; nothing was recorded",
        ))
    }
}
