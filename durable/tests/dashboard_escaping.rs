//! Hostile input on every page of the dashboard, in a real browser: queue names, job
//! ids, payloads, errors, schedule ids and a leader's name that are markup, attribute
//! breakouts (double and single quotes), a `</title>` and `javascript:` URL, shown on
//! the home page, the queue pages and the job pages, logged out and logged in (where
//! ids also sit in the buttons' hidden inputs); and the pages that echo what a request
//! sent (an unknown queue, "No such job", an invalid id, an unknown action, the message
//! after an action). On each page nothing the input tried to create exists in the DOM
//! (no element or attribute carrying its `pwned` marker, no event handler, no script,
//! no link or form leaving the dashboard's origin), no script ran (a dialog fails the
//! test at once), and the text reads back exactly as it was given.

mod browser;

use tickless_test_support as support;

use browser::{enc, serve, Browser};
use serde_json::{json, Value};
use std::time::Duration;
use support::{at, RedisServer, T0};
use tickless_durable::dashboard::Dashboard;
use tickless_durable::{Leader, LeaderOptions, Queue, WorkerOptions};

const TOKEN: &str = "let-me-act";
/// Each names a queue and is the id, payload, error, leader name and script error in
/// it. Every element or attribute one would create carries `pwned`; each script it
/// would run opens a dialog.
const HOSTILE: [&str; 8] = [
    "<img src=x pwned onerror=alert(1)>",
    "\"><script pwned>alert(2)</script>",
    "'><svg pwned onload=alert(3)>",
    "</title><svg pwned onload=alert(4)>",
    "\" pwned=\"1\" autofocus onfocus=\"alert(5)",
    "' pwned='1' autofocus onfocus='alert(6)",
    "javascript:alert(7)//",
    "</style></pre><b pwned>&amp;8</b>",
];

/// The ids of queue `h`'s jobs: ready, in flight, dead, and its recurring schedule.
struct Ids {
    ready: String,
    in_flight: String,
    dead: String,
    schedule: String,
}

fn ids(h: &str) -> Ids {
    Ids {
        ready: h.to_string(),
        in_flight: format!("{h} (in flight)"),
        dead: format!("{h} (dead)"),
        schedule: format!("{h} (hourly)"),
    }
}

/// Queue `h`: one job in each state, a schedule, a leader, a script error, all `h`.
async fn hostile_queue(
    server: &RedisServer,
    admin: &mut redis::aio::MultiplexedConnection,
    h: &str,
) -> (Queue, Leader) {
    let ids = ids(h);
    let queue = Queue::connect(&server.url(), h).await.unwrap();
    queue.set_manual_clock(Some(at(T0))).await.unwrap();
    let worker = queue.worker(WorkerOptions::default());
    queue
        .schedule(&ids.in_flight, h.as_bytes(), at(T0))
        .await
        .unwrap();
    let claimed = worker.try_claim(1).await.unwrap();
    assert_eq!(claimed[0].id(), ids.in_flight);
    let once = queue.with_max_attempts(1);
    once.schedule(&ids.dead, h.as_bytes(), at(T0))
        .await
        .unwrap();
    let claimed = worker.try_claim(1).await.unwrap();
    assert_eq!(claimed[0].id(), ids.dead);
    worker.fail(&claimed[0], h).await.unwrap();
    queue
        .schedule(&ids.ready, h.as_bytes(), at(T0))
        .await
        .unwrap();
    queue
        .every(&ids.schedule, Duration::from_secs(3600), h.as_bytes())
        .await
        .unwrap();
    let mut options = LeaderOptions::default();
    options.name = Some(h.to_string());
    let mut leader = queue.leader(options);
    leader.step().await.unwrap();
    assert!(leader.is_leading());
    let _: () = redis::cmd("HSET")
        .arg(format!("tickless:{{{h}}}:meta"))
        .arg("n_script_errors")
        .arg(1)
        .arg("last_script_error")
        .arg(h)
        .query_async(admin)
        .await
        .unwrap();
    (queue, leader)
}

/// What on the page shown the hostile input could have made: elements and attributes
/// carrying the marker, attributes that are not a plain word, elements the dashboard
/// never has, event handlers, links or forms to another origin (a `javascript:` URL is
/// one).
const INJECTED: &str = "(() => {
    const bad = [];
    const never = ['script', 'img', 'iframe', 'object', 'embed', 'base', 'b', 'textarea'];
    for (const el of document.querySelectorAll('*')) {
        if (never.includes(el.localName)) bad.push('<' + el.localName + '>');
        for (const a of el.attributes) {
            // A breakout leaves the rest of the input as attribute names: any name
            // that is not a plain word is one.
            if (a.name.includes('pwned') || a.name.startsWith('on') || !/^[a-z][a-z0-9-]*$/i.test(a.name)
                || ['autofocus', 'src', 'srcdoc', 'formaction'].includes(a.name)) {
                bad.push(el.localName + ' ' + a.name + '=' + a.value);
            }
        }
    }
    for (const el of document.querySelectorAll('a, form')) {
        const url = el.getAttribute(el.localName === 'a' ? 'href' : 'action');
        const to = new URL(url ?? 'about:blank', document.baseURI);
        if (to.origin !== location.origin) bad.push(el.localName + ' to ' + to.href);
    }
    return bad;
})()";

fn assert_clean(browser: &mut Browser, page: &str) {
    let bad = browser.eval(INJECTED);
    assert_eq!(bad, json!([]), "hostile input became markup on {page}");
}

/// What stands for a job's error or payload before logging in.
const HIDDEN: &str = "hidden: log in with the access token to see it";

/// What a queue's page shows of its user data.
const QUEUE_PAGE: &str = "(() => {
    const q = s => document.querySelector(s);
    const texts = s => [...document.querySelectorAll(s)].map(e => e.textContent);
    return {
        name: q('#queue-name').textContent,
        title: document.title,
        ready: texts('#ready a.job'),
        in_flight: texts('#in-flight a.job'),
        dead: [...document.querySelectorAll('#dead tr')].slice(1)
            .map(r => [r.cells[0].textContent, r.cells[2].textContent]),
        schedules: [...document.querySelectorAll('#schedules tr[data-schedule]')]
            .map(r => [r.dataset.schedule, r.cells[0].textContent]),
        script_error: q('#last-script-error').textContent,
        leader: q('#leader').textContent,
        links: [...document.querySelectorAll('a.job')].map(a => {
            const to = new URL(a.href);
            return [a.textContent, decodeURIComponent(to.pathname), to.searchParams.get('id'), a.href];
        }),
        hidden_ids: [...document.querySelectorAll('input[type=hidden][name=id]')].map(i => i.value).sort(),
    };
})()";

/// What a job's page shows of its user data.
const JOB_PAGE: &str = "(() => {
    const q = s => document.querySelector(s);
    const queue = [...document.querySelectorAll('a')].find(a => a.textContent.startsWith('queue '));
    return {
        id: q('#job-id').textContent,
        title: document.title,
        queue: [queue.textContent, decodeURIComponent(new URL(queue.href).pathname)],
        payload: q('#payload')?.textContent ?? null,
        error: q('#last-error')?.textContent ?? null,
        hidden_ids: [...document.querySelectorAll('input[type=hidden][name=id]')].map(i => i.value),
    };
})()";

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("a list: {value}"))
        .iter()
        .map(|v| v.as_str().expect("a string").to_string())
        .collect()
}

/// Queue `h`'s page (reached by `url`, its link on the home page), then each job's page
/// by its link there.
fn check_queue_and_job_pages(browser: &mut Browser, h: &str, url: &str, logged_in: bool) {
    let ids = ids(h);
    browser.open(url);
    assert_clean(browser, &format!("the page of queue {h:?}"));
    let page = browser.eval(QUEUE_PAGE);
    assert_eq!(page["name"], json!(h), "{page}");
    assert_eq!(page["title"], json!(format!("{h} · tickless")), "{page}");
    assert_eq!(page["ready"], json!([ids.ready]), "{page}");
    assert_eq!(page["in_flight"], json!([ids.in_flight]), "{page}");
    // Errors and payloads show only to a logged-in browser.
    let data = |text: &str| if logged_in { json!(text) } else { Value::Null };
    let dead_error = if logged_in { h } else { HIDDEN };
    assert_eq!(page["dead"], json!([[ids.dead, dead_error]]), "{page}");
    assert_eq!(
        page["schedules"],
        json!([[ids.schedule, ids.schedule]]),
        "{page}"
    );
    assert_eq!(page["script_error"], json!(h), "{page}");
    let leader = page["leader"].as_str().unwrap();
    assert!(leader.starts_with(&format!("{h} (token ")), "{leader}");
    let mut hidden = vec![ids.dead.clone(), ids.dead.clone(), ids.schedule.clone()];
    hidden.sort();
    let hidden = if logged_in { hidden } else { Vec::new() };
    assert_eq!(strings(&page["hidden_ids"]), hidden, "{page}");
    let links = page["links"].as_array().unwrap().clone();
    assert_eq!(links.len(), 3, "{page}");
    for link in &links {
        assert_eq!(link[1], json!(format!("/ops/queue/{h}/job")), "{link}");
        assert_eq!(link[2], link[0], "the link's id is its text: {link}");
    }
    for link in links {
        let id = link[0].as_str().unwrap();
        browser.open(link[3].as_str().unwrap());
        assert_clean(browser, &format!("the page of job {id:?}"));
        let job = browser.eval(JOB_PAGE);
        assert_eq!(job["id"], json!(id), "{job}");
        assert_eq!(job["title"], json!(format!("{id} · tickless")), "{job}");
        assert_eq!(
            job["queue"],
            json!([format!("queue {h}"), format!("/ops/queue/{h}")])
        );
        assert_eq!(job["payload"], data(h), "{job}");
        let error = if id == ids.dead { data(h) } else { Value::Null };
        assert_eq!(job["error"], error, "{job}");
        let hidden = strings(&job["hidden_ids"]);
        assert_eq!(hidden.is_empty(), !logged_in, "{job}");
        assert!(hidden.iter().all(|i| i == id), "{job}");
    }
}

/// The pages that echo what the request sent, for queue `h`.
fn check_echoes(browser: &mut Browser, base: &str, h: &str, logged_in: bool) {
    let queue = format!("{base}/queue/{}", enc(h));
    let missing = format!("{h} (no such queue)");
    browser.open(&format!("{base}/queue/{}", enc(&missing)));
    assert_clean(browser, &format!("the page of unknown queue {missing:?}"));
    let said = format!("no queue {missing:?} on this dashboard");
    assert_eq!(browser.text("#error"), said);

    let never = format!("{h} (never)");
    browser.open(&format!("{queue}/job?id={}&msg={}", enc(&never), enc(h)));
    assert_clean(browser, &format!("the page of missing job {never:?}"));
    assert_eq!(browser.text("#job-id"), never);
    assert!(browser.text("#state").starts_with("No such job"));
    assert_eq!(browser.text("#msg"), h);

    browser.open(&format!("{queue}?msg={}", enc(h)));
    assert_clean(browser, &format!("queue {h:?} with a message"));
    assert_eq!(browser.text("#msg"), h);

    let too_long = h.repeat(600 / h.len() + 1);
    browser.open(&format!("{queue}/job?id={}", enc(&too_long)));
    assert_clean(browser, &format!("an invalid id in queue {h:?}"));
    let error = browser.text("#error");
    assert!(error.starts_with("invalid job id \""), "{error}");

    if logged_in {
        browser.post_form(&format!("{queue}/action"), &[("action", h), ("id", h)]);
        assert_clean(browser, &format!("unknown action {h:?}"));
        assert_eq!(browser.text("#error"), format!("unknown action {h:?}"));
    }
}

#[test]
fn hostile_names_ids_payloads_and_errors_stay_text_on_every_page() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (addr, mut admin, _leaders) = runtime.block_on(async {
        let mut admin = server.admin().await;
        let mut queues = Vec::new();
        let mut leaders = Vec::new();
        for h in HOSTILE {
            let (queue, leader) = hostile_queue(&server, &mut admin, h).await;
            queues.push(queue);
            leaders.push(leader);
        }
        let dashboard = Dashboard::new(queues).action_token(TOKEN).router();
        let app = axum::Router::new().nest("/ops", dashboard);
        (serve(app).await, admin, leaders)
    });
    let base = format!("http://{addr}/ops");
    let mut browser = Browser::launch();

    for logged_in in [false, true] {
        browser.open(&base);
        if logged_in {
            browser.submit(&format!(
                "document.getElementById('token').value = {}; \
                 document.getElementById('login').submit()",
                json!(TOKEN)
            ));
            browser.open(&base);
        }
        assert_clean(&mut browser, "the home page");
        let rows = browser.eval(
            "[...document.querySelectorAll('#queues tr[data-queue]')].map(r => {
                const a = r.querySelector('a');
                return [r.dataset.queue, a.textContent, decodeURIComponent(new URL(a.href).pathname),
                        r.cells[5].textContent, a.href];
            })",
        );
        let rows = rows.as_array().unwrap();
        assert_eq!(rows.len(), HOSTILE.len(), "{rows:?}");
        for (row, h) in rows.iter().zip(HOSTILE) {
            assert_eq!(row[0], json!(h), "{row}");
            assert_eq!(row[1], json!(h), "{row}");
            assert_eq!(row[2], json!(format!("/ops/queue/{h}")), "{row}");
            let leader = row[3].as_str().unwrap();
            assert!(leader.starts_with(&format!("{h} (token ")), "{leader}");
        }
        for (row, h) in rows.iter().zip(HOSTILE) {
            check_queue_and_job_pages(&mut browser, h, row[4].as_str().unwrap(), logged_in);
            check_echoes(&mut browser, &base, h, logged_in);
        }
    }

    // Logged in, the buttons post the ids they hold back exactly: Redis (read with plain
    // commands) shows the dead job retried and the schedule removed.
    for h in HOSTILE {
        let ids = ids(h);
        let queue = format!("{base}/queue/{}", enc(h));
        browser.open(&format!("{queue}/job?id={}", enc(&ids.dead)));
        browser.submit("document.querySelector('button.retry').click()");
        assert_clean(&mut browser, &format!("job {:?} retried", ids.dead));
        assert_eq!(browser.text("#msg"), format!("retrying {:?}", ids.dead));
        assert_eq!(browser.text("#job-id"), ids.dead);
        browser.open(&queue);
        browser.submit("document.querySelector('#schedules button.unschedule').click()");
        assert_clean(
            &mut browser,
            &format!("schedule {:?} removed", ids.schedule),
        );
        let said = format!("removed the recurring schedule {:?}", ids.schedule);
        assert_eq!(browser.text("#msg"), said);
        let (dead, recur): (Option<f64>, bool) = runtime.block_on(async {
            redis::pipe()
                .zscore(format!("tickless:{{{h}}}:dead"), &ids.dead)
                .hexists(format!("tickless:{{{h}}}:recur"), &ids.schedule)
                .query_async(&mut admin)
                .await
                .unwrap()
        });
        assert_eq!((dead, recur), (None, false), "queue {h:?}");
    }
}
