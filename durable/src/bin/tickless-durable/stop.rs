//! `serve`'s clean stop. On SIGTERM (a deploy: `docker stop`, Kubernetes, systemd) or
//! Ctrl-C, at once and side by side: the HTTP server takes no new connection and ends
//! each one after its request in flight (an idle keep-alive connection at once), the
//! leaders step down (a candidate elsewhere takes over at once, not at the lease's end),
//! and the webhook dispatchers claim nothing more, finish their requests in flight and
//! send their acks. All of it has `--stop-grace` seconds; what is left then is dropped,
//! as by a crash: at least once still holds, a job whose delivery was cut short is
//! delivered again at its lease end. A second signal does not hurry it (the grace bounds
//! it); SIGKILL does.

use tokio::sync::watch;

/// Watches for the stop signals from here on; the receiver holds the first one's name.
///
/// # Errors
///
/// The signal handlers cannot be installed.
pub(crate) fn on_signal() -> Result<watch::Receiver<Option<&'static str>>, String> {
    let (tx, rx) = watch::channel(None);
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot watch for SIGTERM: {e}"))?;
    tokio::spawn(async move {
        #[cfg(unix)]
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        };
        #[cfg(not(unix))]
        let name = {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl-C"
        };
        let _ = tx.send(Some(name));
        // The sender lives on, so that receivers wait rather than see it gone.
        std::future::pending::<()>().await;
    });
    Ok(rx)
}

/// Resolves once a stop signal has come, to its name.
pub(crate) async fn signalled(mut stop: watch::Receiver<Option<&'static str>>) -> &'static str {
    match stop.wait_for(Option::is_some).await {
        Ok(name) => name.unwrap_or("a signal"),
        Err(_) => "a signal",
    }
}
