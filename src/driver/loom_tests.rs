//! Every interleaving of a registration with a driver turn, under loom.
//!
//! Run with `RUSTFLAGS="--cfg tickless_loom" cargo test --release --lib loom`.
//! The property is rule 4 of the ground rules: an insert that needs the driver earlier than
//! it would wake on its own is either seen by the turn or wakes the driver.

use super::*;
use loom::sync::atomic::AtomicBool as LoomBool;
use std::task::Wake;
use std::time::Duration;

struct Flag(LoomBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::SeqCst);
    }
}

fn shared() -> Arc<Shared> {
    Arc::new(Shared::new(
        Clock::new(Duration::from_millis(1), clock::Source::Real),
        64,
    ))
}

fn register(shared: &Arc<Shared>, deadline_tick: u64) -> usize {
    match shared.register(deadline_tick, Some(Waker::noop())) {
        Registered::Pending(key) => key,
        Registered::Elapsed => panic!("tick {deadline_tick} is not due"),
    }
}

#[test]
fn loom_an_earlier_insert_racing_a_turn_is_never_missed() {
    loom::model(|| {
        let shared = shared();
        let flag = Arc::new(Flag(LoomBool::new(false)));
        let driver_waker = Waker::from(flag.clone());
        // A first turn stores the driver's waker and arms it; a timer due at tick 3 makes
        // the next turn release the lock to wake it; one at tick 100 arms the driver at 64.
        register(&shared, 3);
        register(&shared, 100);
        shared.turn_at(0, &driver_waker, &mut Vec::new());

        let driver = {
            let shared = shared.clone();
            loom::thread::spawn(move || shared.turn_at(5, &driver_waker, &mut Vec::new()))
        };
        let key = register(&shared, 10);
        let next = driver.join().unwrap();

        let seen_by_turn = next.is_some_and(|next| next <= 10);
        assert!(
            seen_by_turn || flag.0.load(Ordering::SeqCst),
            "tick 10 neither armed ({next:?}) nor woke the driver"
        );
        shared.cancel(key);
    });
}

#[test]
fn loom_a_cancel_racing_the_fire_of_the_same_timer_leaves_nothing_behind() {
    loom::model(|| {
        let shared = shared();
        let key = register(&shared, 2);
        let driver = {
            let shared = shared.clone();
            loom::thread::spawn(move || shared.turn_at(2, Waker::noop(), &mut Vec::new()))
        };
        shared.cancel(key);
        assert_eq!(driver.join().unwrap(), None);
        assert_eq!(shared.snapshot().registered, 0);
    });
}
