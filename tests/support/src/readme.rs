//! Code blocks of durable/README.md, for the tests that run them as shown.

/// The one ```` ```lang ```` block of durable/README.md that contains `marker` (its text
/// between the fences); panics unless exactly one does, so a test cannot pick the wrong
/// block as the README grows.
pub fn readme_block(lang: &str, marker: &str) -> String {
    let readme = include_str!("../../../durable/README.md");
    let blocks: Vec<&str> = readme
        .split(&format!("```{lang}\n"))
        .skip(1)
        .map(|rest| rest.split("\n```").next().expect("a closing fence"))
        .filter(|block| block.contains(marker))
        .collect();
    assert_eq!(
        blocks.len(),
        1,
        "one ```{lang} block of durable/README.md contains {marker:?}"
    );
    blocks[0].to_string()
}
