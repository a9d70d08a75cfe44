//! The encoding thresholds of the collection types, read from the configuration once
//! per CONFIG SET instead of on every command.

use crate::config::Config;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodingLimits {
    /// list-max-listpack-size: > 0 entries per node, < 0 a byte size class (-1 = 4 KiB
    /// ... -5 = 64 KiB).
    pub list_max_listpack_size: i64,
    pub list_compress_depth: i64,
    pub hash_max_listpack_entries: i64,
    pub hash_max_listpack_value: i64,
    pub set_max_intset_entries: i64,
    pub zset_max_listpack_entries: i64,
    pub zset_max_listpack_value: i64,
    pub stream_node_max_bytes: i64,
    pub stream_node_max_entries: i64,
}

impl EncodingLimits {
    pub fn from_config(c: &Config) -> EncodingLimits {
        let get = |name: &str, default: i64| c.int_param(name).unwrap_or(default);
        EncodingLimits {
            list_max_listpack_size: get("list-max-listpack-size", -2),
            list_compress_depth: get("list-compress-depth", 0),
            hash_max_listpack_entries: get("hash-max-listpack-entries", 128),
            hash_max_listpack_value: get("hash-max-listpack-value", 64),
            set_max_intset_entries: get("set-max-intset-entries", 512),
            zset_max_listpack_entries: get("zset-max-listpack-entries", 128),
            zset_max_listpack_value: get("zset-max-listpack-value", 64),
            stream_node_max_bytes: get("stream-node-max-bytes", 4096),
            stream_node_max_entries: get("stream-node-max-entries", 100),
        }
    }
}

impl Default for EncodingLimits {
    fn default() -> Self {
        EncodingLimits::from_config(&Config::default())
    }
}
