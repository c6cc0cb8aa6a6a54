//! The dashboard's dead jobs a page at a time (`?dead_from=`), read in-process through
//! the router (no browser needed for links).

use tickless_durable::Queue;
use tickless_test_support as support;

mod in_process;
use in_process::get;

#[tokio::test]
async fn the_dead_jobs_are_shown_a_page_at_a_time() {
    let server = support::RedisServer::start();
    let name = support::queue_name("dead-pages");
    let queue = Queue::connect(&server.url(), &name).await.unwrap();
    let mut conn = server.admin().await;
    let key = |suffix: &str| format!("tickless:{{{name}}}:{suffix}");
    // 60 dead jobs (a page shows 50), oldest first by when they died.
    let mut pipe = redis::pipe();
    for i in 0..60 {
        let id = format!("dead-{i:02}");
        pipe.hset(key("jobs"), &id, "1700000000000|d|1|1|0|p")
            .zadd(key("dead"), &id, i);
    }
    let _: () = pipe.query_async(&mut conn).await.unwrap();

    let first = get(&queue, &format!("/queue/{name}")).await;
    assert!(first.contains("Dead (1 to 50, oldest first)"), "{first}");
    assert!(first.contains("dead-49") && !first.contains("dead-50"));
    assert!(first.contains(&format!("/queue/{name}?dead_from=50")));
    let second = get(&queue, &format!("/queue/{name}?dead_from=50")).await;
    assert!(second.contains("Dead (51 to 60, oldest first)"), "{second}");
    assert!(second.contains("dead-50") && second.contains("dead-59"));
    assert!(!second.contains("dead-49") && !second.contains("dead_from="));
    assert!(second.contains("id=\"dead-first\""));
}
