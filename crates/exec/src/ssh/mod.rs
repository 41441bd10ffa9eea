//! stub
use crate::Context;
use crate::error::Result;
/// stub
pub struct SshBackend;
impl SshBackend {
    #[allow(unused)]
    pub(crate) fn new(
        _c: &crate::config::SshConfig,
        _ctx: Context,
    ) -> Result<crate::local::LocalBackend> {
        todo!()
    }
    #[allow(unused)]
    pub(crate) async fn connect(
        _c: &crate::config::SshConfig,
        _ctx: Context,
    ) -> Result<crate::local::LocalBackend> {
        todo!()
    }
}
