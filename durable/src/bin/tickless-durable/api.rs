//! `serve`'s HTTP API (feature `api`): its queues and its tokens.

use crate::args::{options, Serve};
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tickless_durable::api::{Api, ApiMetrics, Token};
use tickless_durable::dashboard::Dashboard;
use tickless_durable::{LeaderHandle, LeaderOptions};

/// The API's router for `serve`'s queues (when none is named, the queues its tokens
/// name, and no other: [`Api::any_queue`]), and what to print of it. Tokens come from `--api-tokens-file` (or
/// `TICKLESS_API_TOKENS_FILE`) or `TICKLESS_API_TOKENS`, never from an argument that
/// the process list shows. With `--lead`, the leaders of the named queues, running until
/// dropped.
pub(crate) async fn router(args: &Serve) -> Result<(Mount, String, Vec<LeaderHandle>), String> {
    let tokens = tokens(args)?;
    let options = options(&args.redis)?;
    let mut leaders = Vec::new();
    let api = if args.queues.is_empty() {
        if args.lead {
            return Err("--lead leads the queues named: name them".into());
        }
        Api::new([]).any_queue(options)
    } else {
        let mut queues = Vec::new();
        for name in &args.queues {
            let queue = options.connect(name).await.map_err(|e| e.to_string())?;
            if args.lead {
                leaders.push(queue.leader(LeaderOptions::default()).spawn());
            }
            queues.push(queue);
        }
        Api::new(queues)
    };
    let shown = if tokens.is_empty() {
        "API refusing every request (no token: see --api-tokens-file)".to_string()
    } else {
        let names: Vec<&str> = tokens.iter().map(Token::name).collect();
        format!("API with {} token(s) ({})", tokens.len(), names.join(", "))
    };
    let shown = if args.lead {
        format!("{shown}, leading {} queue(s),", leaders.len())
    } else {
        shown
    };
    let api = api.tokens(tokens);
    let mount = Mount {
        metrics: api.metrics(),
        router: api.router(),
    };
    Ok((mount, shown, leaders))
}

fn tokens(args: &Serve) -> Result<Vec<Token>, String> {
    let text = std::env::var("TICKLESS_API_TOKENS")
        .ok()
        .filter(|t| !t.trim().is_empty());
    match (&args.api_tokens_file, text) {
        (Some(_), Some(_)) => Err(
            "give the API's tokens in --api-tokens-file or TICKLESS_API_TOKENS, not both".into(),
        ),
        (Some(path), None) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the API tokens file {}: {e}", path.display()))?;
            Token::parse_lines(&text).map_err(|e| format!("{}: {e}", path.display()))
        }
        (None, Some(text)) => Token::parse_lines(&text.replace(';', "\n"))
            .map_err(|e| format!("TICKLESS_API_TOKENS: {e}")),
        (None, None) => Ok(Vec::new()),
    }
}

/// `dashboard` showing on its home page which of the API's tokens were used (by name).
pub(crate) fn show_tokens(dashboard: Dashboard, api: &Mount) -> Dashboard {
    let metrics = api.metrics.clone();
    dashboard.api_tokens(move || metrics.token_use())
}

/// The API's router and figures, for [`mount`].
pub(crate) struct Mount {
    router: axum::Router,
    metrics: ApiMetrics,
}

/// The dashboard's `app` with the API's figures after the queues' in `/metrics`: the
/// layer wraps the dashboard's routes only, not the API's that [`mount`] adds, so that an
/// API request does not pay for it (a boxed future and a clone of the inner service a
/// request: `axum::middleware::from_fn`'s way).
pub(crate) fn metrics(app: axum::Router, api: &Mount) -> axum::Router {
    let metrics = api.metrics.clone();
    append_metrics(app, move || metrics.render())
}

/// The dashboard's `app` with the API beside it.
pub(crate) fn mount(app: axum::Router, api: Mount) -> axum::Router {
    app.merge(api.router)
}

/// `app` with `render`'s figures after the others in `/metrics`.
pub(crate) fn append_metrics(
    app: axum::Router,
    render: impl Fn() -> String + Clone + Send + Sync + 'static,
) -> axum::Router {
    app.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| {
            let render = render.clone();
            async move {
                let scrape = request.uri().path() == "/metrics";
                let response = next.run(request).await;
                if !scrape || response.status() != StatusCode::OK {
                    return response;
                }
                let (mut parts, body) = response.into_parts();
                let Ok(text) = axum::body::to_bytes(body, 64 << 20).await else {
                    return StatusCode::INTERNAL_SERVER_ERROR.into_response();
                };
                let mut text = text.to_vec();
                text.extend_from_slice(render().as_bytes());
                parts.headers.remove(header::CONTENT_LENGTH);
                Response::from_parts(parts, Body::from(text))
            }
        },
    ))
}

/// `--tls-cert` and `--tls-key` read into a rustls acceptor (on ring, the provider this
/// crate already builds), if given.
pub(crate) fn tls(args: &Serve) -> Result<Option<tokio_rustls::TlsAcceptor>, String> {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return Ok(None);
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("cannot read the certificates of {}: {e}", cert.display()))?;
    // The error names the file, never the key's bytes.
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read the private key of {}: {e}", key.display()))?;
    let provider = std::sync::Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| format!("TLS: {e}"))?;
    Ok(Some(tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(
        config,
    ))))
}

/// Serves `app` over TLS: each connection's handshake and HTTP/1.1 in a task of its own,
/// so a slow or failed handshake holds up no one else. At `stop`, no new connection is
/// taken, and each open one ends after its request in flight.
pub(crate) async fn serve_tls(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    acceptor: tokio_rustls::TlsAcceptor,
    stop: tokio::sync::watch::Receiver<Option<&'static str>>,
) -> Result<(), String> {
    use hyper_util::rt::TokioIo;
    use hyper_util::service::TowerToHyperService;
    let mut connections = tokio::task::JoinSet::new();
    loop {
        // Finished connections' results, dropped as they come.
        while connections.try_join_next().is_some() {}
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = crate::stop::signalled(stop.clone()) => break,
        };
        let (tcp, _) = match accepted {
            Ok(accepted) => accepted,
            // Out of file descriptors, say: the next accept may succeed.
            Err(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let (acceptor, app, stop) = (acceptor.clone(), app.clone(), stop.clone());
        connections.spawn(async move {
            let handshake =
                tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(tcp));
            let Ok(Ok(tls)) = handshake.await else {
                return;
            };
            let service = TowerToHyperService::new(app);
            let connection = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service);
            let mut connection = std::pin::pin!(connection);
            tokio::select! {
                _ = connection.as_mut() => {}
                _ = crate::stop::signalled(stop) => {
                    connection.as_mut().graceful_shutdown();
                    let _ = connection.await;
                }
            }
        });
    }
    while connections.join_next().await.is_some() {}
    Ok(())
}
