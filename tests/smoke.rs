mod common;
use common::*;

#[test]
fn set_get_across_two_shards() {
    let s = Server::start(2);
    let mut c = s.client();
    let _: () = redis::cmd("SET")
        .arg(KEY_SHARD0)
        .arg("a")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("SET")
        .arg(KEY_SHARD1)
        .arg("b")
        .query(&mut c)
        .unwrap();
    let v: Vec<String> = redis::cmd("MGET")
        .arg(KEY_SHARD0)
        .arg(KEY_SHARD1)
        .query(&mut c)
        .unwrap();
    assert_eq!(v, vec!["a", "b"]);
}
