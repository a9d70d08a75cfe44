//! The `cluster-*` parameters as the node reads them: the engine's settings, the
//! ports it announces (Redis's deriveAnnouncedPorts), the bus port it listens on
//! and where its nodes.conf lives (clusterInit's checks, with Redis's texts).

use super::membership::Settings;
use super::redirect::EndpointType;
use crate::config::Config;
use std::path::PathBuf;

/// The distance from the client port to the bus port when `cluster-port` is 0.
pub const PORT_INCR: u16 = 10000;

fn int(config: &Config, name: &str, default: i64) -> i64 {
    config.int_param(name).unwrap_or(default)
}

fn port_param(config: &Config, name: &str) -> u16 {
    u16::try_from(int(config, name, 0)).unwrap_or(0)
}

fn flag(config: &Config, name: &str, default: bool) -> bool {
    config.bool_param(name).unwrap_or(default)
}

/// The client port the cluster knows this node by: the TLS port in a TLS
/// cluster, the plaintext one otherwise.
fn client_port(config: &Config) -> u16 {
    if flag(config, "tls-cluster", false) {
        port_param(config, "tls-port")
    } else {
        config.port()
    }
}

/// The port the bus listens on: `cluster-port`, or the client port + 10000,
/// which must fit (clusterInit refuses a client port above 55535 otherwise).
pub fn bus_port(config: &Config) -> Result<u16, &'static str> {
    let configured = port_param(config, "cluster-port");
    if configured != 0 {
        return Ok(configured);
    }
    client_port(config).checked_add(PORT_INCR).ok_or(
        "Redis port number too high. Cluster communication port is 10,000 port numbers higher than your Redis port. Your Redis port number must be 55535 or less.",
    )
}

/// deriveAnnouncedPorts: (port, pport, cport) as this node announces them; the
/// `cluster-announce-*` settings override what it listens on.
pub fn announced_ports(config: &Config) -> (u16, u16, u16) {
    let tls = flag(config, "tls-cluster", false);
    let mut port = client_port(config);
    let mut pport = if tls { config.port() } else { 0 };
    let mut cport = bus_port(config).unwrap_or(0);
    let announce_tls = port_param(config, "cluster-announce-tls-port");
    let announce = port_param(config, "cluster-announce-port");
    if tls && announce_tls != 0 {
        port = announce_tls;
        pport = announce;
    } else if announce != 0 {
        port = announce;
    }
    let announce_bus = port_param(config, "cluster-announce-bus-port");
    if announce_bus != 0 {
        cport = announce_bus;
    }
    (port, pport, cport)
}

/// The engine's settings from the configuration.
pub fn engine_settings(config: &Config) -> Settings {
    let (port, pport, cport) = announced_ports(config);
    let announce_ip = Some(config.str_param("cluster-announce-ip")).filter(|ip| !ip.is_empty());
    let preferred_endpoint = match config.enum_param("cluster-preferred-endpoint-type") {
        Some("hostname") => EndpointType::Hostname,
        Some("unknown-endpoint") => EndpointType::UnknownEndpoint,
        _ => EndpointType::Ip,
    };
    Settings {
        node_timeout: u64::try_from(int(config, "cluster-node-timeout", 15000)).unwrap_or(15000),
        announce_ip: announce_ip.map(str::to_string),
        hostname: config.str_param("cluster-announce-hostname").to_string(),
        port,
        pport,
        cport,
        require_full_coverage: flag(config, "cluster-require-full-coverage", true),
        allow_replica_migration: flag(config, "cluster-allow-replica-migration", true),
        replica_no_failover: flag(config, "cluster-replica-no-failover", false),
        replica_validity_factor: u64::try_from(int(config, "cluster-replica-validity-factor", 10))
            .unwrap_or(10),
        repl_ping_period_ms: u64::try_from(int(config, "repl-ping-replica-period", 10))
            .unwrap_or(10)
            * 1000,
        migration_barrier: usize::try_from(int(config, "cluster-migration-barrier", 1))
            .unwrap_or(1),
        allow_reads_when_down: flag(config, "cluster-allow-reads-when-down", false),
        allow_pubsubshard_when_down: flag(config, "cluster-allow-pubsubshard-when-down", true),
        tls_cluster: flag(config, "tls-cluster", false),
        preferred_endpoint,
    }
}

/// `cluster-config-file`, relative to `dir` as Redis's is (it runs in `dir`).
pub fn config_file(config: &Config) -> PathBuf {
    let file = PathBuf::from(config.str_param("cluster-config-file"));
    if file.is_absolute() {
        file
    } else {
        PathBuf::from(config.dir()).join(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(args: &[&str]) -> Config {
        Config::load(args.iter().map(|a| a.to_string())).expect("valid arguments")
    }

    #[test]
    fn the_bus_port_is_the_client_port_plus_ten_thousand_unless_set() {
        assert_eq!(bus_port(&config(&["--port", "7000"])), Ok(17000));
        assert!(bus_port(&config(&["--port", "55536"]))
            .unwrap_err()
            .starts_with("Redis port number too high."));
        assert!(bus_port(&config(&["--port", "55536", "--cluster-port", "0"])).is_err());
    }

    #[test]
    fn defaults_are_redis_defaults() {
        let s = engine_settings(&config(&["--port", "7000"]));
        assert_eq!((s.port, s.pport, s.cport), (7000, 0, 17000));
        assert_eq!(s.node_timeout, 15000);
        assert_eq!(s.announce_ip, None);
        assert!(
            s.require_full_coverage && s.allow_replica_migration && s.allow_pubsubshard_when_down
        );
        assert!(!s.replica_no_failover && !s.allow_reads_when_down && !s.tls_cluster);
        assert_eq!(
            (
                s.replica_validity_factor,
                s.repl_ping_period_ms,
                s.migration_barrier
            ),
            (10, 10_000, 1)
        );
        assert_eq!(s.preferred_endpoint, EndpointType::Ip);
    }

    #[test]
    fn the_config_file_lives_in_dir_unless_absolute() {
        let c = config(&["--dir", "/tmp"]);
        assert_eq!(config_file(&c), PathBuf::from("/tmp/nodes.conf"));
    }
}
