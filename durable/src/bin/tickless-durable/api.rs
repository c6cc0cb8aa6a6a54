//! `serve`'s HTTP API (feature `api`): its queues and its tokens.

use crate::args::{options, Serve};
use tickless_durable::api::{Api, Token};
use tickless_durable::{LeaderHandle, LeaderOptions};

/// The API's router for `serve`'s queues (every queue of the server when none is
/// named), and what to print of it. Tokens come from `--api-tokens-file` (or
/// `TICKLESS_API_TOKENS_FILE`) or `TICKLESS_API_TOKENS`, never from an argument that
/// the process list shows. With `--lead`, the leaders of the named queues, running until
/// dropped.
pub(crate) async fn router(
    args: &Serve,
) -> Result<(axum::Router, String, Vec<LeaderHandle>), String> {
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
    Ok((api.tokens(tokens).router(), shown, leaders))
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
