//! `serve --webhooks-file` (feature `webhooks`): dispatchers for the queues the file
//! routes to targets, their figures in `/metrics` and on the queues' pages.

use crate::args::{options, Serve};
use tickless_durable::dashboard::Dashboard;
use tickless_durable::hook::{Dispatchers, Webhooks};

/// The dispatchers (running until dropped) and what to print of them; `None` without
/// `--webhooks-file`.
pub(crate) async fn start(args: &Serve) -> Result<Option<(Dispatchers, String)>, String> {
    let Some(path) = &args.webhooks_file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the webhooks file {}: {e}", path.display()))?;
    let webhooks = Webhooks::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let options = options(&args.redis)?;
    let mut queues = Vec::new();
    for name in webhooks.queues() {
        queues.push(options.connect(name).await.map_err(|e| e.to_string())?);
    }
    let dispatchers = webhooks.spawn(queues)?;
    let shown = format!(
        "webhooks: {} queue(s) to {} target(s) ({})",
        webhooks.queues().len(),
        webhooks.targets().len(),
        webhooks.targets().join(", ")
    );
    Ok(Some((dispatchers, shown)))
}

/// `dashboard` showing, on each dispatched queue's page, its target and recent failures.
pub(crate) fn show(dashboard: Dashboard, hooks: &Option<(Dispatchers, String)>) -> Dashboard {
    match hooks {
        Some((dispatchers, _)) => {
            let metrics = dispatchers.metrics();
            dashboard.webhooks(move |queue| metrics.view(queue))
        }
        None => dashboard,
    }
}

/// `app` with the dispatchers' figures in `/metrics`.
pub(crate) fn metrics(app: axum::Router, hooks: &Option<(Dispatchers, String)>) -> axum::Router {
    match hooks {
        Some((dispatchers, _)) => {
            let metrics = dispatchers.metrics();
            crate::api::append_metrics(app, move || metrics.render())
        }
        None => app,
    }
}
