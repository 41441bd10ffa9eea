//! placeholder
use crate::Context;
use crate::error::Result;
/// placeholder
pub struct DaytonaBackend;
impl DaytonaBackend {
    pub(crate) fn new(_c: &crate::config::DaytonaConfig, _ctx: Context) -> Result<Box<dyn crate::Backend>> {
        Err(crate::ExecError::Unsupported { backend: crate::BackendKind::Daytona, what: "not yet".into() })
    }
}
