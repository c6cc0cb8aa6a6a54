//! `serve --webhooks-file` (feature `webhooks`): dispatchers for the queues the file
//! routes to targets, their figures in `/metrics`.

use crate::args::{options, Serve};
use tickless_durable::hook::{Dispatchers, Webhooks};

/// `app` with the dispatchers' figures in `/metrics`, the dispatchers (running until
/// dropped), and what to print of them; `app` as it was without `--webhooks-file`.
pub(crate) async fn start(
    args: &Serve,
    app: axum::Router,
) -> Result<(axum::Router, Option<Dispatchers>, Option<String>), String> {
    let Some(path) = &args.webhooks_file else {
        return Ok((app, None, None));
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
    let metrics = dispatchers.metrics();
    let app = crate::api::append_metrics(app, move || metrics.render());
    let shown = format!(
        "webhooks: {} queue(s) to {} target(s) ({})",
        webhooks.queues().len(),
        webhooks.targets().len(),
        webhooks.targets().join(", ")
    );
    Ok((app, Some(dispatchers), Some(shown)))
}
