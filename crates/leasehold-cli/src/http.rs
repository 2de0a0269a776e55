//! The one HTTP/1 listener of `run`, `elect` and `cron` (`--health`, `--metrics-addr`): `/metrics`
//! beside the health endpoints, 404 for any other path. Promise: each request is answered from
//! memory by the caller's function, never by waiting on the store. Limit: plain HTTP, no
//! authentication: bind it to an address only the scraper and the probes reach.

use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::CONTENT_TYPE;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

/// An answer: status, content type, body.
pub(crate) type Reply = (StatusCode, &'static str, String);

/// Plain text, for the health endpoints' bodies and the 404.
pub(crate) const TEXT: &str = "text/plain; charset=utf-8";

/// Serves `listener` in the background: `/metrics` from the recorder (404 when none is installed),
/// any other path as `answer` says (`None`: 404 naming `paths`).
pub(crate) fn serve<F>(
    listener: std::net::TcpListener,
    paths: &'static str,
    answer: F,
) -> std::io::Result<()>
where
    F: Fn(&str) -> Option<Reply> + Send + Sync + 'static,
{
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let answer = Arc::new(answer);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req: Request<_>| {
                    let r = route(req.uri().path(), paths, &*answer);
                    async move { Ok::<_, std::convert::Infallible>(r) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok(())
}

fn route(path: &str, paths: &str, answer: &dyn Fn(&str) -> Option<Reply>) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match (path, crate::prom::render()) {
        ("/metrics", Some(text)) => (StatusCode::OK, crate::prom::CONTENT_TYPE, text),
        _ => answer(path).unwrap_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                TEXT,
                format!("no such path: {path}; try {paths}\n"),
            )
        }),
    };
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(CONTENT_TYPE, v);
    }
    r
}
