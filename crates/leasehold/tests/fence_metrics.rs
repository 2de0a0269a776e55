//! Fence checks are counted by backend and outcome, with no resource name in the labels.

use leasehold::db::metrics::FENCE_CHECKS_TOTAL;
use leasehold::db::Database;
use leasehold::Fence;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[test]
fn accepted_and_stale_fence_checks_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let db = Database::connect("sqlite::memory:").await.unwrap();
            db.migrate().await.unwrap();
            db.begin_fenced("r", Fence::new(5))
                .await
                .unwrap()
                .commit()
                .await
                .unwrap();
            db.begin_fenced("r", Fence::new(5))
                .await
                .unwrap()
                .commit()
                .await
                .unwrap();
            assert!(db.begin_fenced("r", Fence::new(4)).await.is_err());
        });
    });
    let mut accepted = 0;
    let mut stale = 0;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if key.name() != FENCE_CHECKS_TOTAL {
            continue;
        }
        let labels: Vec<(String, String)> = key
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        assert!(
            labels.contains(&("backend".into(), "sqlite".into())),
            "{labels:?}"
        );
        assert!(
            labels.iter().all(|(_, v)| v != "r"),
            "resource names must not be labels"
        );
        let DebugValue::Counter(n) = value else {
            panic!("counter expected")
        };
        if labels.contains(&("outcome".into(), "accepted".into())) {
            accepted += n;
        } else if labels.contains(&("outcome".into(), "stale".into())) {
            stale += n;
        }
    }
    assert_eq!((accepted, stale), (2, 1));
}
