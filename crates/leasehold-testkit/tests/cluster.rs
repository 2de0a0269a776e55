//! The cluster does what its helpers say, against real redis-server nodes in cluster mode.

use std::time::Duration;

use leasehold_testkit::cluster::key_slot;
use leasehold_testkit::{Credentials, RedisCluster};

const FAILOVER: Duration = Duration::from_secs(30);

fn connect(url: &str) -> redis::Connection {
    let con = redis::Client::open(url)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    con
}

fn get(con: &mut redis::Connection, key: &str) -> redis::RedisResult<Option<String>> {
    redis::cmd("GET").arg(key).query(con)
}

/// The error code (`MOVED`, `ASK`) and the port it redirects to.
fn redirect(res: redis::RedisResult<Option<String>>) -> (String, u16) {
    let err = res.expect_err("the node must redirect");
    let (addr, _slot) = err.redirect_node().expect("a redirection names a node");
    let port = addr.rsplit_once(':').unwrap().1.parse().unwrap();
    (err.code().unwrap_or_default().to_owned(), port)
}

#[test]
fn cluster_forms_with_every_slot_served_and_routes_keys_by_slot() {
    let c = RedisCluster::start().unwrap();
    assert_eq!(c.nodes().len(), 6);
    assert_eq!(c.masters().unwrap(), vec![0, 1, 2]);
    for m in 0..3 {
        assert_eq!(c.replicas_of(m).unwrap(), vec![m + 3]);
    }
    assert_eq!(c.master_of_slot(0).unwrap(), 0);
    assert_eq!(c.master_of_slot(16383).unwrap(), 2);
    let url = c.seed_url();
    assert!(url.starts_with("redis-cluster://127.0.0.1:"), "{url}");
    assert_eq!(url.matches(',').count(), 5, "{url}");

    let mut any = connect(&c.node(4).url());
    for key in ["a", "lease:{job-7}", "{user1000}.following", "x{}{y}"] {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut any)
            .unwrap();
        assert_eq!(key_slot(key), slot, "slot of {key:?}");

        let owner = c.master_of_key(key).unwrap();
        let mut con = connect(&c.node(owner).url());
        redis::cmd("SET")
            .arg(key)
            .arg("v")
            .query::<()>(&mut con)
            .unwrap();
        let other = (owner + 1) % 3;
        let mut wrong = connect(&c.node(other).url());
        assert_eq!(
            redirect(get(&mut wrong, key)),
            ("MOVED".to_owned(), c.node(owner).port()),
            "a master that does not serve {key:?} must answer MOVED to its owner"
        );
    }
}

#[test]
fn killing_the_master_of_a_slot_promotes_its_replica_and_the_old_master_rejoins_as_replica() {
    let mut c = RedisCluster::start().unwrap();
    let key = "lease:{nightly}";
    let slot = key_slot(key);
    let old = c.master_of_slot(slot).unwrap();
    let replica = c.replicas_of(old).unwrap()[0];
    let mut con = connect(&c.node(old).url());
    redis::cmd("SET")
        .arg(key)
        .arg("held")
        .query::<()>(&mut con)
        .unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut con).unwrap();
    assert_eq!(acked, 1);
    drop(con);

    let new = c.kill_master_of_slot(slot, FAILOVER).unwrap();
    assert_eq!(
        new, replica,
        "the killed master's own replica must take the slot"
    );
    let mut con = connect(&c.node(new).url());
    assert_eq!(get(&mut con, key).unwrap().as_deref(), Some("held"));

    c.restart_node(old).unwrap();
    assert_eq!(c.replicas_of(new).unwrap(), vec![old]);
    assert_eq!(c.master_of_slot(slot).unwrap(), new);
    let mut back = connect(&c.node(old).url());
    assert_eq!(
        redirect(get(&mut back, key)),
        ("MOVED".to_owned(), c.node(new).port()),
        "the rejoined node no longer serves the slot"
    );
}

#[test]
fn a_slot_migrated_mid_test_answers_ask_then_moved_with_acl_credentials() {
    let c = RedisCluster::builder()
        .credentials(Credentials::user("app", "cluster-secret"))
        .start()
        .unwrap();
    assert!(
        c.seed_url()
            .starts_with("redis-cluster://app:cluster-secret@127.0.0.1:"),
        "{}",
        c.seed_url()
    );
    let (moved_key, staying_key) = ("{acct-9}:lease", "{acct-9}:fence");
    let slot = key_slot(moved_key);
    assert_eq!(slot, key_slot(staying_key));
    let from = c.master_of_slot(slot).unwrap();
    let to = c
        .masters()
        .unwrap()
        .into_iter()
        .find(|&m| m != from)
        .unwrap();
    let mut src = connect(&c.node(from).url());
    for key in [moved_key, staying_key] {
        redis::cmd("SET")
            .arg(key)
            .arg(key)
            .query::<()>(&mut src)
            .unwrap();
    }

    let m = c.begin_slot_migration(slot, to).unwrap();
    c.move_keys(&m, &[moved_key.as_bytes()]).unwrap();
    assert_eq!(
        redirect(get(&mut src, moved_key)),
        ("ASK".to_owned(), c.node(to).port()),
        "the source must send a moved key's request to the target with ASK"
    );
    assert_eq!(
        get(&mut src, staying_key).unwrap().as_deref(),
        Some(staying_key)
    );
    let mut dst = connect(&c.node(to).url());
    assert_eq!(
        redirect(get(&mut dst, moved_key)).0,
        "MOVED",
        "the target serves an importing slot only after ASKING"
    );
    redis::cmd("ASKING").query::<()>(&mut dst).unwrap();
    assert_eq!(
        get(&mut dst, moved_key).unwrap().as_deref(),
        Some(moved_key)
    );

    c.finish_slot_migration(m).unwrap();
    assert_eq!(c.master_of_slot(slot).unwrap(), to);
    assert_eq!(
        redirect(get(&mut src, staying_key)),
        ("MOVED".to_owned(), c.node(to).port())
    );
    for key in [moved_key, staying_key] {
        assert_eq!(get(&mut dst, key).unwrap().as_deref(), Some(key));
    }

    // And back in one go.
    c.migrate_slot(slot, from).unwrap();
    assert_eq!(c.master_of_slot(slot).unwrap(), from);
    assert_eq!(
        get(&mut src, staying_key).unwrap().as_deref(),
        Some(staying_key)
    );
}
