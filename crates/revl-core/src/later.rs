//! Tool inverses and the repair of forks, commits and aborts arrive with the manifest and
//! fork modules; until then a tool inverse cannot exist in a WAL this build wrote.

use crate::error::{Code, Error, Result};
use crate::session::Session;
use crate::step::Step;

impl Session {
    pub(crate) fn run_tool_inverse(&mut self, s: &Step) -> Result<()> {
        Err(Error::new(
            Code::ToolFailed,
            format!("step {} ({}): this build cannot run tool inverses", s.index, s.label),
            "use a revl build with manifest support",
        ))
    }

    pub(crate) fn repair_more(&mut self) -> Result<()> {
        Ok(())
    }
}
