//! The peer of `durable.rs`: a ZSET-per-job queue. Job `id` is the hash
//! `peer:{q}:job:<id>` (payload, attempts, due); `delayed` scores ids by due time; a mover
//! (no election: one process) sleeps until the head of `delayed` and moves what is due to
//! `ready`; workers claim into `active` (scored by lease end) and ack by deleting. Its
//! scripts are short enough to read here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tickless_durable::When;

const PEER_SCHEDULE: &str = r"
local p = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #ARGV, 2 do
  local key = p .. 'job:' .. ARGV[i]
  if redis.call('EXISTS', key) == 0 then
    local due = now + tonumber(ARGV[i + 1])
    redis.call('HSET', key, 'data', '', 'attempts', 0, 'due', due)
    redis.call('ZADD', p .. 'delayed', due, ARGV[i])
  end
end
return 1";

const PEER_CANCEL: &str = r"
local p = KEYS[1]
local n = 0
for i = 1, #ARGV do
  redis.call('ZREM', p .. 'delayed', ARGV[i])
  n = n + redis.call('DEL', p .. 'job:' .. ARGV[i])
end
return n";

const PEER_PROMOTE: &str = r"
local p = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', p .. 'delayed', '-inf', now, 'LIMIT', 0, 1000)
if #due > 0 then
  redis.call('ZREM', p .. 'delayed', unpack(due))
  redis.call('RPUSH', p .. 'ready', unpack(due))
end
local head = redis.call('ZRANGE', p .. 'delayed', 0, 0, 'WITHSCORES')
return { now, head[2] or -1, #due }";

const PEER_CLAIM: &str = r"
local p = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 2, #ARGV do
  redis.call('ZREM', p .. 'active', ARGV[i])
  redis.call('DEL', p .. 'job:' .. ARGV[i])
end
local ids = redis.call('LPOP', p .. 'ready', tonumber(ARGV[1]))
local out = { now }
if not ids then return out end
for _, id in ipairs(ids) do
  redis.call('HINCRBY', p .. 'job:' .. id, 'attempts', 1)
  redis.call('ZADD', p .. 'active', now + 30000, id)
  local job = redis.call('HMGET', p .. 'job:' .. id, 'data', 'due')
  out[#out + 1] = id
  out[#out + 1] = tonumber(job[2])
end
return out";

#[derive(Clone)]
pub struct Peer {
    conn: redis::aio::ConnectionManager,
    client: redis::Client,
    prefix: String,
}

impl Peer {
    pub async fn connect(url: &str, name: &str) -> Peer {
        let client = redis::Client::open(url).expect("url");
        let conn = client.get_connection_manager().await.expect("connect");
        Peer {
            conn,
            client,
            prefix: format!("peer:{{{name}}}:"),
        }
    }

    pub async fn schedule<'a>(&self, jobs: impl Iterator<Item = (&'a str, When)>) {
        let script = redis::Script::new(PEER_SCHEDULE);
        let jobs: Vec<(&str, When)> = jobs.collect();
        for group in jobs.chunks(128 * 32) {
            let mut pipe = redis::pipe();
            for chunk in group.chunks(128) {
                let cmd = pipe
                    .cmd("EVALSHA")
                    .arg(script.get_hash())
                    .arg(1)
                    .arg(&self.prefix);
                for (id, when) in chunk {
                    let ms = match when {
                        When::After(d) => d.as_millis() as u64,
                        When::At(at) => at
                            .duration_since(SystemTime::now())
                            .map_or(0, |d| d.as_millis() as u64),
                    };
                    cmd.arg(*id).arg(ms);
                }
            }
            script
                .prepare_invoke()
                .load_async(&mut self.conn.clone())
                .await
                .expect("load");
            let _: Vec<redis::Value> = pipe
                .query_async(&mut self.conn.clone())
                .await
                .expect("schedule");
        }
    }

    pub async fn cancel(&self, ids: &[String]) {
        let script = redis::Script::new(PEER_CANCEL);
        script
            .prepare_invoke()
            .load_async(&mut self.conn.clone())
            .await
            .expect("load");
        for group in ids.chunks(128) {
            let mut pipe = redis::pipe();
            for id in group {
                pipe.cmd("EVALSHA")
                    .arg(script.get_hash())
                    .arg(1)
                    .arg(&self.prefix)
                    .arg(id);
            }
            let _: Vec<redis::Value> = pipe
                .query_async(&mut self.conn.clone())
                .await
                .expect("cancel");
        }
    }

    /// Sleeps until the head of `delayed` (as our leader does), moves what is due.
    pub async fn mover(self) {
        let script = redis::Script::new(PEER_PROMOTE);
        let mut conn = self.conn.clone();
        loop {
            let (now, head, moved): (i64, i64, i64) = script
                .key(&self.prefix)
                .invoke_async(&mut conn)
                .await
                .expect("promote");
            if moved >= 1000 {
                continue;
            }
            let wait = if head < 0 {
                Duration::from_secs(3600)
            } else {
                Duration::from_millis((head - now).max(0) as u64)
            };
            tickless::sleep(wait).await;
        }
    }

    /// Claims up to 64 at a time, acks each batch with the next claim, waits with BLMOVE.
    pub async fn worker(self, lags: Arc<Mutex<Vec<Duration>>>, early: Arc<AtomicUsize>) {
        let script = redis::Script::new(PEER_CLAIM);
        let mut conn = self.conn.clone();
        let mut waiter = self
            .client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let ready = format!("{}ready", self.prefix);
        let mut acks: Vec<String> = Vec::new();
        loop {
            let mut invocation = script.key(&self.prefix);
            invocation.arg(64);
            for id in &acks {
                invocation.arg(id);
            }
            let reply: Vec<redis::Value> = invocation.invoke_async(&mut conn).await.expect("claim");
            acks.clear();
            let now: i64 = redis::from_redis_value(&reply[0]).unwrap_or(0);
            for pair in reply[1..].chunks(2) {
                let id: String = redis::from_redis_value(&pair[0]).unwrap_or_default();
                let due: i64 = redis::from_redis_value(&pair[1]).unwrap_or(0);
                if now < due {
                    early.fetch_add(1, Ordering::Relaxed);
                }
                lags.lock()
                    .unwrap()
                    .push(Duration::from_millis((now - due).max(0) as u64));
                acks.push(id);
            }
            if reply.len() == 1 && acks.is_empty() {
                let _: Option<Vec<u8>> = redis::cmd("BLMOVE")
                    .arg(&ready)
                    .arg(&ready)
                    .arg("LEFT")
                    .arg("LEFT")
                    .arg(0)
                    .query_async(&mut waiter)
                    .await
                    .expect("wait");
            }
        }
    }
}
