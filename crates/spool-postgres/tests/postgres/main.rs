//! The PostgreSQL store's tests, each on a database of its own in the binary's
//! throwaway cluster.

mod budget;
mod cluster;
mod common;
mod damage;
mod errors;
mod journal;
mod proxy;
mod server;
mod tls;
mod versions;
