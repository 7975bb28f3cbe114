//! A Redis connection for tests' own commands.

/// A connection for a test's own Redis commands with no reply timeout:
/// the client's default of 500 ms passes on a busy machine (a test failed
/// on a plain `SET` with both cores loaded), and a hang is caught by the
/// test's own guard instead.
pub(crate) async fn patient_redis(client: &::redis::Client) -> ::redis::aio::MultiplexedConnection {
    let config = ::redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(std::time::Duration::from_secs(30)))
        .set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("a connection to Redis")
}
