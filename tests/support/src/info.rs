//! `INFO` sections read as numbers: what the tests and benchmarks that count Redis's work
//! (commands served, script calls, CPU) parse, once.

/// One line of `INFO commandstats`: `cmdstat_<name>:calls=..,usec=..,..,failed_calls=..`.
#[derive(Clone, Debug, PartialEq)]
pub struct CommandStat {
    /// The command, lower case (`evalsha`, `hset`, `client|list`).
    pub name: String,
    /// Calls executed (those Redis rejected before running them are not counted).
    pub calls: u64,
    /// Time spent, in µs.
    pub usec: f64,
    /// Of those, calls that failed (`failed_calls`: an `EVALSHA` of a script not loaded,
    /// a script that raised; 0 before Redis 7, which did not count them).
    pub failed: u64,
}

impl CommandStat {
    /// Calls that ran to their end.
    pub fn ran(&self) -> u64 {
        self.calls.saturating_sub(self.failed)
    }
}

/// Every command of an `INFO commandstats` reply, in its order.
pub fn command_stats(info: &str) -> Vec<CommandStat> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.trim_end().strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| -> Option<&str> {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            };
            Some(CommandStat {
                name: name.to_string(),
                calls: field("calls")?.parse().ok()?,
                usec: field("usec").map_or(0.0, |v| v.parse().unwrap_or(0.0)),
                failed: field("failed_calls").map_or(0, |v| v.parse().unwrap_or(0)),
            })
        })
        .collect()
}

/// Calls of the commands `names` (`["evalsha", "fcall"]`) in an `INFO commandstats` reply.
pub fn calls_of(info: &str, names: &[&str]) -> u64 {
    command_stats(info)
        .iter()
        .filter(|stat| names.contains(&stat.name.as_str()))
        .map(|stat| stat.calls)
        .sum()
}

/// Calls of every command but `INFO` itself (which the reading adds).
pub fn calls_but_info(info: &str) -> u64 {
    command_stats(info)
        .iter()
        .filter(|stat| stat.name != "info")
        .map(|stat| stat.calls)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPLY: &str = "# Commandstats\r\n\
        cmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,rejected_calls=1,failed_calls=2\r\n\
        cmdstat_info:calls=3,usec=90,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_client|list:calls=1,usec=5,usec_per_call=5.00\r\n\
        cmdstat_hset:calls=7,usec=4,usec_per_call=0.57,rejected_calls=0,failed_calls=0\r\n";

    #[test]
    fn every_line_is_read_with_its_counts() {
        let stats = command_stats(REPLY);
        assert_eq!(stats.len(), 4);
        assert_eq!(
            stats[0],
            CommandStat {
                name: "evalsha".into(),
                calls: 12,
                usec: 340.0,
                failed: 2
            }
        );
        assert_eq!(stats[0].ran(), 10);
        assert_eq!(stats[2].name, "client|list");
        assert_eq!(stats[2].failed, 0, "no failed fields before Redis 7");
        assert_eq!(calls_of(REPLY, &["evalsha", "fcall"]), 12);
        assert_eq!(calls_but_info(REPLY), 20);
        assert_eq!(calls_of("# Commandstats\r\n", &["evalsha"]), 0);
    }
}
