//! What a queue's page says of its jobs to come, read in-process through the router: the
//! "Coming due" charts count the cold tier's windows, draw a wide bucket's jobs as one bar
//! (and a dashed line as far as they may be due), say "1 job"; and a warning when jobs are
//! due and no leader runs to deliver them.

use std::time::Duration;
use support::{at, RedisServer, T0};
use tickless_durable::{LeaderOptions, Queue};
use tickless_test_support as support;

mod in_process;
use in_process::get;

/// The queue's own page.
async fn page(queue: &Queue) -> String {
    get(queue, &format!("/queue/{}", queue.name())).await
}

/// The chart `id` of the page: its `<svg>` element, and the caption of its figure.
fn chart<'a>(page: &'a str, id: &str) -> (&'a str, &'a str) {
    let start = page
        .find(&format!("<svg id=\"{id}\""))
        .unwrap_or_else(|| panic!("no chart {id} in {page}"));
    let svg = &page[start..];
    let svg = &svg[..svg.find("</svg>").expect("the chart's end")];
    let figure = &page[..start];
    let caption = &figure[figure.rfind("<figcaption>").expect("a caption")..];
    let caption = &caption["<figcaption>".len()..caption.find("</figcaption>").unwrap()];
    (svg, caption)
}

/// The text of each bar's `<title>` in a chart.
fn bar_titles(svg: &str) -> Vec<&str> {
    svg.split("class=\"bar\"><title>")
        .skip(1)
        .map(|rest| &rest[..rest.find("</title>").unwrap()])
        .collect()
}

#[tokio::test]
async fn one_job_in_a_wide_bucket_is_one_bar_with_a_line_as_far_as_it_may_be_due() {
    let server = RedisServer::start();
    let queue = Queue::connect(&server.url(), &support::queue_name("due-wide"))
        .await
        .unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    // 40 min ahead: in a bucket of 70 min or wider (the coarsest that starts after now).
    queue
        .schedule("review:1", b"", at(T0 + 40 * 60_000))
        .await
        .unwrap();
    let (buckets, _) = queue.due_buckets().await.unwrap();
    assert_eq!(buckets.len(), 1, "{buckets:?}");
    assert!(buckets[0].width >= Duration::from_secs(3600), "{buckets:?}");
    let from_min = buckets[0]
        .start
        .duration_since(at(T0))
        .expect("the bucket starts after now")
        .as_secs()
        / 60;

    let page = page(&queue).await;
    let (svg, caption) = chart(&page, "due-hour");
    // Before: the job spread over the bucket's minutes, some 30 bars of "0.01 jobs".
    assert_eq!(bar_titles(svg).len(), 1, "one bar: {svg}");
    let title = bar_titles(svg)[0];
    assert!(
        title.starts_with(&format!("1 job due from +{from_min}."))
            && title.contains("somewhere up to +"),
        "{title}"
    );
    assert_eq!(svg.matches("class=\"span\"").count(), 1, "{svg}");
    assert!(
        svg.contains(">1 job</text>"),
        "the y axis says 1 job: {svg}"
    );
    assert_eq!(
        caption,
        "next hour, per minute: 1 job; 1 of them may come due after +1 h"
    );
    let (_, week) = chart(&page, "due-week");
    assert_eq!(week, "next week, per 4 h: 1 job");
}

#[cfg(feature = "cold")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_count_the_jobs_of_the_cold_tier() {
    use tickless_durable::{ColdTier, When};

    let server = RedisServer::start();
    let name = support::queue_name("due-cold");
    let dir = std::env::temp_dir().join(format!("tickless-due-cold-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    // README's short horizon: jobs 30-50 s ahead go cold, in 5 s windows.
    let tier = ColdTier::local(&dir)
        .unwrap()
        .horizon(Duration::from_secs(20))
        .window(Duration::from_secs(5));
    let queue = Queue::connect(&server.url(), &name)
        .await
        .unwrap()
        .with_cold_tier(tier);
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let jobs: Vec<(String, Vec<u8>, std::time::SystemTime)> = (0..200u64)
        .map(|i| (format!("rate:{i}"), vec![b'5'], at(T0 + 30_000 + i * 100)))
        .collect();
    let added = queue
        .schedule_batch(
            jobs.iter()
                .map(|(id, p, due)| (id.as_str(), p.as_slice(), When::At(*due))),
        )
        .await
        .unwrap();
    assert_eq!(added.iter().filter(|&&a| a).count(), 200);
    let mut leader = queue.leader(LeaderOptions::default());
    leader.step().await.unwrap();
    assert_eq!(leader.stats().cold_moved, 200, "the jobs went cold");
    assert!(queue.due_buckets().await.unwrap().0.is_empty());

    let page = page(&queue).await;
    let (svg, caption) = chart(&page, "due-hour");
    // Before: "next hour, per minute: 0 jobs" (the cold jobs are not in the wheel).
    assert_eq!(caption, "next hour, per minute: 200 jobs");
    let titles = bar_titles(svg);
    assert_eq!(titles.len(), 1, "{svg}");
    assert!(
        titles[0].starts_with("200 jobs due from now; 200 of them in the cold tier"),
        "{}",
        titles[0]
    );
    assert_eq!(
        svg.matches("class=\"part\"").count(),
        1,
        "the cold part: {svg}"
    );
    for id in ["due-day", "due-week"] {
        assert!(chart(&page, id).1.ends_with(": 200 jobs"), "{id}");
    }
    drop(leader);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_page_warns_when_jobs_are_due_and_no_leader_runs() {
    let server = RedisServer::start();
    let queue = Queue::connect(&server.url(), &support::queue_name("due-no-leader"))
        .await
        .unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    queue.schedule("soon", b"", at(T0 + 10_000)).await.unwrap();
    queue
        .schedule("later", b"", at(T0 + 3_600_000))
        .await
        .unwrap();
    assert!(
        !page(&queue).await.contains("id=\"no-leader\""),
        "nothing is due yet"
    );
    queue
        .advance_manual_clock(Duration::from_secs(20))
        .await
        .unwrap();
    let said = page(&queue).await;
    assert!(
        said.contains("<p class=\"warn\" id=\"no-leader\">No leader: 1 job is due, and none is delivered until a leader runs"),
        "{said}"
    );
    // A leader (its lease live on the manual clock) moves it to the ready list.
    let mut leader = queue.leader(LeaderOptions::default());
    leader.step().await.unwrap();
    assert!(leader.is_leading());
    assert!(!page(&queue).await.contains("id=\"no-leader\""));
}
