//! placeholder
use crate::Context;
use crate::error::Result;
/// placeholder
pub struct ModalBackend;
impl ModalBackend {
    pub(crate) fn new(_c: &crate::config::ModalConfig, _ctx: Context) -> Result<Box<dyn crate::Backend>> {
        Err(crate::ExecError::Unsupported { backend: crate::BackendKind::Modal, what: "not yet".into() })
    }
}
