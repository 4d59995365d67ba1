//! The Redis quota store against a real Redis (127.0.0.1:6379, or
//! `SWITCHYARD_TEST_REDIS_URL`): atomicity under concurrency, and parity with the
//! in-memory ledger the SQLite store uses.

#![expect(
    clippy::panic,
    reason = "a missing Redis fails the test loudly, naming the URL"
)]

use std::sync::Arc;
use switchyard_core::quota::decide::Unit;
use switchyard_core::quota::decide::{fair_share, Policy, Share};
use switchyard_core::quota::ledger::{Ask, PoolLedger};
use switchyard_core::quota::plan::Dimension;
use switchyard_core::quota::window::Window;
use switchyard_store::redis_counters::{DimArgs, RedisCounters, SettleTarget};

/// A reservation id of this test run's own.
fn id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

async fn store() -> RedisCounters {
    let url = std::env::var("SWITCHYARD_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let prefix = format!("sytest-{:016x}", rand::random::<u64>());
    RedisCounters::connect(&url, &prefix)
        .await
        .unwrap_or_else(|e| panic!("Redis at {url} is needed for this test: {e}"))
}

fn policy_code(p: Policy) -> u8 {
    match p {
        Policy::Hard => 0,
        Policy::Soft => 1,
        Policy::Burst => 2,
    }
}

fn args(d: &Dimension, cost: f64, weight: f64, policy: Policy, cap: Option<f64>) -> DimArgs {
    DimArgs {
        dim: d.key(),
        slot_ms: d.window.slot_ms(),
        limit: d.limit,
        cost,
        cap,
        fair_share: fair_share(d.limit, weight),
        policy: policy_code(policy),
        signal: None,
    }
}

#[tokio::test]
async fn two_hundred_concurrent_reservations_against_fifty_of_headroom_admit_fifty() {
    let s = Arc::new(store().await);
    let dim = Dimension::new(Unit::Requests, Window::Daily, 50.0);
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                let key = format!("k{}", i % 4);
                let a = args(&dim, 1.0, 25.0, Policy::Burst, None);
                s.reserve("pool", &key, &id(), 0.5, &[a])
                    .await
                    .unwrap()
                    .admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for t in tasks {
        if t.await.unwrap() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 50);
    let (_, v) = s
        .peek("pool", "k0", &[(dim.key(), dim.window.slot_ms())])
        .await
        .unwrap();
    assert_eq!(v[0].1, 50.0);
    s.clear().await.unwrap();
}

#[tokio::test]
async fn concurrent_reserve_and_settle_lose_no_update() {
    let s = Arc::new(store().await);
    let dims = [
        Dimension::new(Unit::Requests, Window::Daily, 1e9),
        Dimension::new(Unit::Tokens, Window::Hourly, 1e12),
    ];
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let s = Arc::clone(&s);
            tokio::spawn(async move {
                let key = format!("k{}", i % 5);
                for _ in 0..25 {
                    let a = [
                        args(&dims[0], 1.0, 20.0, Policy::Hard, None),
                        args(&dims[1], 100.0, 20.0, Policy::Hard, None),
                    ];
                    let rid = id();
                    let r = s.reserve("pool", &key, &rid, 0.5, &a).await.unwrap();
                    assert!(r.admitted);
                    // Settle: the request counts once, tokens fall from 100 to 37.
                    let settle = targets(&dims, &[1.0, 37.0]);
                    s.settle("pool", &key, (&rid, true), &settle).await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let q: Vec<(String, u64)> = dims.iter().map(|d| (d.key(), d.window.slot_ms())).collect();
    let (_, v) = s.peek("pool", "k0", &q).await.unwrap();
    // 40 tasks x 25 requests; k0 made 8 x 25 of them.
    assert_eq!(v[0], (200.0, 1000.0));
    assert_eq!(v[1], (200.0 * 37.0, 1000.0 * 37.0));
    s.clear().await.unwrap();
}

fn targets(dims: &[Dimension], amounts: &[f64]) -> Vec<SettleTarget> {
    dims.iter()
        .zip(amounts)
        .map(|(d, a)| SettleTarget {
            dim: d.key(),
            slot_ms: d.window.slot_ms(),
            target: *a,
        })
        .collect()
}

#[tokio::test]
async fn settlements_by_reservation_id_apply_once() {
    let s = store().await;
    let dims = [
        Dimension::new(Unit::Requests, Window::Daily, 1e9),
        Dimension::new(Unit::Tokens, Window::Daily, 1e12),
    ];
    let q: Vec<(String, u64)> = dims.iter().map(|d| (d.key(), d.window.slot_ms())).collect();
    let a = [
        args(&dims[0], 1.0, 50.0, Policy::Hard, None),
        args(&dims[1], 100.0, 50.0, Policy::Hard, None),
    ];
    let counts = || async { s.peek("pool", "k", &q).await.unwrap().1 };
    let rid = id();
    assert!(
        s.reserve("pool", "k", &rid, 0.5, &a)
            .await
            .unwrap()
            .admitted
    );
    // The same id again (a duplicate) books nothing more.
    assert!(
        s.reserve("pool", "k", &rid, 0.5, &a)
            .await
            .unwrap()
            .admitted
    );
    assert_eq!(counts().await, vec![(1.0, 1.0), (100.0, 100.0)]);
    // A running settlement sent twice (a retry after a timeout) moves it once.
    for _ in 0..2 {
        s.settle("pool", "k", (&rid, false), &targets(&dims, &[1.0, 150.0]))
            .await
            .unwrap();
    }
    assert_eq!(counts().await, vec![(1.0, 1.0), (150.0, 150.0)]);
    // The final one too; a late copy of an earlier settlement changes nothing after it.
    for _ in 0..2 {
        s.settle("pool", "k", (&rid, true), &targets(&dims, &[1.0, 37.0]))
            .await
            .unwrap();
    }
    s.settle("pool", "k", (&rid, false), &targets(&dims, &[1.0, 150.0]))
        .await
        .unwrap();
    assert_eq!(counts().await, vec![(1.0, 1.0), (37.0, 37.0)]);

    // Released after it ran: nothing left of it.
    let ran = id();
    assert!(
        s.reserve("pool", "k", &ran, 0.5, &a)
            .await
            .unwrap()
            .admitted
    );
    s.settle("pool", "k", (&ran, true), &targets(&dims, &[0.0, 0.0]))
        .await
        .unwrap();
    assert_eq!(counts().await, vec![(1.0, 1.0), (37.0, 37.0)]);

    // Released before it ran (the gateway gave up on a hanging Redis): when it runs at
    // last it books nothing and says so.
    let late = id();
    s.settle("pool", "k", (&late, true), &targets(&dims, &[0.0, 0.0]))
        .await
        .unwrap();
    assert!(
        !s.reserve("pool", "k", &late, 0.5, &a)
            .await
            .unwrap()
            .admitted
    );
    assert_eq!(counts().await, vec![(1.0, 1.0), (37.0, 37.0)]);
    s.clear().await.unwrap();
}

/// One step of the parity scenario: key, cost, its share, its cap.
struct Step {
    key: &'static str,
    cost: f64,
    weight: f64,
    policy: Policy,
    cap: Option<f64>,
}

#[tokio::test]
async fn redis_and_the_in_memory_ledger_make_identical_decisions() {
    let s = store().await;
    let dims = vec![
        Dimension::new(Unit::Requests, Window::Hourly, 20.0),
        Dimension::new(Unit::Tokens, Window::Daily, 5_000.0),
    ];
    let mut ledger = PoolLedger::new(dims.clone());
    let mut steps = Vec::new();
    // A borrows while lenient; B (soft) and C (capped burst) interleave; token costs
    // vary so the token dimension blocks some requests the request dimension admits.
    for i in 0..60 {
        let (key, weight, policy, cap) = match i % 3 {
            0 => ("a", 20.0, Policy::Hard, None),
            1 => ("b", 40.0, Policy::Soft, None),
            _ => ("c", 40.0, Policy::Burst, Some(6.0)),
        };
        steps.push(Step {
            key,
            cost: f64::from((i * 37 % 11) as u32) * 40.0 + 10.0,
            weight,
            policy,
            cap,
        });
    }
    let mut admitted_count = 0;
    for (i, st) in steps.iter().enumerate() {
        let costs = [1.0, st.cost];
        let caps = [st.cap, None];
        let a: Vec<DimArgs> = dims
            .iter()
            .zip(costs)
            .zip(caps)
            .map(|((d, c), cap)| args(d, c, st.weight, st.policy, cap))
            .collect();
        let r = s.reserve("pool", st.key, &id(), 0.5, &a).await.unwrap();
        let (decision, booked, _) = ledger.reserve(
            r.now,
            Ask {
                key_id: st.key,
                share: Share {
                    weight: st.weight,
                    policy: st.policy,
                },
                caps: &caps,
                costs: &costs,
                signals: &[None, None],
                saturation_threshold: 0.5,
                growth: false,
            },
        );
        assert_eq!(r.admitted, decision.admitted(), "step {i}");
        assert_eq!(r.admitted, booked.is_some(), "step {i}");
        let (mine, total, _) = r.dims[1];
        let before = ledger.peek(r.now, st.key)[1];
        let cost_now = if r.admitted { st.cost } else { 0.0 };
        assert_eq!((mine + cost_now, total + cost_now), before, "step {i}");
        if r.admitted {
            admitted_count += 1;
        }
    }
    // The scenario exercises both outcomes.
    assert!(
        admitted_count > 10 && admitted_count < 60,
        "{admitted_count}"
    );
    s.clear().await.unwrap();
}

#[tokio::test]
async fn consumption_slides_out_of_the_window_and_the_counter_forgets_it() {
    let s = store().await;
    // A window of 128 slots of 20 ms: 2.56 s.
    let dim = |cost: f64| DimArgs {
        dim: "requests:test".to_owned(),
        slot_ms: 20,
        limit: 1e9,
        cost,
        cap: None,
        fair_share: 1e9,
        policy: 2,
        signal: None,
    };
    let peek = || async {
        s.peek("pool", "k", &[("requests:test".to_owned(), 20)])
            .await
            .unwrap()
            .1[0]
    };
    assert!(
        s.reserve("pool", "k", &id(), 0.5, &[dim(1.0)])
            .await
            .unwrap()
            .admitted
    );
    tokio::time::sleep(std::time::Duration::from_millis(1300)).await;
    assert!(
        s.reserve("pool", "k", &id(), 0.5, &[dim(2.0)])
            .await
            .unwrap()
            .admitted
    );
    assert_eq!(peek().await, (3.0, 3.0));
    tokio::time::sleep(std::time::Duration::from_millis(1400)).await;
    // The first booking has left the window; the second has not.
    assert_eq!(peek().await, (2.0, 2.0));
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(peek().await, (0.0, 0.0));
    // A later booking starts from a clean counter.
    assert!(
        s.reserve("pool", "k", &id(), 0.5, &[dim(4.0)])
            .await
            .unwrap()
            .admitted
    );
    assert_eq!(peek().await, (4.0, 4.0));
    s.clear().await.unwrap();
}

#[tokio::test]
async fn the_board_keeps_each_entry_s_latest_state_and_forgets_only_what_it_was_told() {
    use switchyard_core::resilience::board::Topic;
    use switchyard_store::redis_board::{BoardChannel, News};
    let url = std::env::var("SWITCHYARD_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let prefix = format!("sytest-{:016x}", rand::random::<u64>());
    let board = BoardChannel::connect(&url, &prefix)
        .await
        .unwrap_or_else(|e| panic!("Redis at {url} is needed for this test: {e}"));
    let news = |id: &str, state: Option<&str>| News {
        from: 7,
        kind: Topic::Lock,
        id: id.to_owned(),
        state: state.map(str::to_owned),
    };
    board
        .publish(&[
            news("a", Some("1")),
            news("b", Some("1")),
            news("b", Some("2")),
            news("c", Some("1")),
            news("c", None),
        ])
        .await
        .unwrap();
    let mut latest = board.latest(Topic::Lock).await.unwrap();
    latest.sort();
    assert_eq!(latest, [("a".into(), "1".into()), ("b".into(), "2".into())]);
    assert_eq!(board.latest(Topic::Breaker).await.unwrap(), []);
    // `b` changed since it was read as "1": it stays.
    let gone = board
        .forget(
            Topic::Lock,
            &[("a".into(), "1".into()), ("b".into(), "1".into())],
        )
        .await
        .unwrap();
    assert_eq!(gone, 1);
    assert_eq!(
        board.latest(Topic::Lock).await.unwrap(),
        [("b".to_owned(), "2".to_owned())]
    );
}
