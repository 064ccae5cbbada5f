//! A free loopback port for a server a test starts. Asking the kernel for port 0 hands out one
//! of its ephemeral range, which every outgoing connection of every test running beside this
//! one draws from too: between the check and the server's own bind, a kubectl call could take
//! it (CI saw kube-controller-manager refused `address already in use`). So the port is drawn
//! at random from below that range, where only servers bind.

use std::hash::{BuildHasher, RandomState};
use std::net::TcpListener;

/// A port of 127.0.0.1 nobody listens on now, below the kernel's ephemeral range.
pub fn free_port() -> u16 {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (from, to) = (10_000u16, low.max(11_000));
    let random = RandomState::new();
    for attempt in 0u64..1_000 {
        let span = u64::from(to - from);
        let port = from + u16::try_from(random.hash_one(attempt) % span).unwrap_or(0);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}
