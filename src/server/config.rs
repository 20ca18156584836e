//! What the server builds from its configuration
//! ([`crate::server_config`]): the responder every worker answers with.

use super::Responder;
use crate::server_config::ServerConfig;

impl ServerConfig {
    pub(super) fn responder(&self) -> Responder {
        Responder::new(
            self.mode,
            wire::dns::Answerer {
                a: self.dns_answer.octets(),
                ttl: self.dns_ttl,
            },
            self.body_size,
            self.reply.clone(),
            self.on_prefix.clone(),
        )
        .with_websocket_push(self.push.over == crate::domain::PushOver::Websocket)
    }
}
