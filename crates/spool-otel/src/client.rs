//! The exporter's HTTP client: ureq, blocking, on the batch processor's own thread
//! (which waits for each export anyway), instead of an async stack of its own.

use std::time::Duration;

use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};

/// The most of a collector's answer that is read: it is a small status message.
const MAX_ANSWER_BYTES: u64 = 1024 * 1024;

/// Posts spans with ureq; every status comes back as a response (the exporter judges
/// it), a connection failure or a timeout as an error.
#[derive(Debug)]
pub(crate) struct UreqClient {
    agent: ureq::Agent,
}

impl UreqClient {
    /// A client whose every call takes at most `timeout`.
    pub(crate) fn new(timeout: Duration) -> UreqClient {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        UreqClient { agent }
    }
}

#[async_trait::async_trait]
impl HttpClient for UreqClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let request = Request::from_parts(parts, body.to_vec());
        let response = self.agent.run(request)?;
        let (parts, body) = response.into_parts();
        let bytes = body
            .into_with_config()
            .limit(MAX_ANSWER_BYTES)
            .read_to_vec()?;
        Ok(Response::from_parts(parts, Bytes::from(bytes)))
    }
}
