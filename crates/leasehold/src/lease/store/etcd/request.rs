//! One request to an etcd member: bounded in time, counted, and moved on to the next member when
//! the current one fails; the puts that attach a key to the retention lease; keep-alives on the
//! shared stream.
//!
//! Promise: every request is bounded by the response timeout plus the connect timeout and counted
//! as one round trip; one whose connection was refused goes to the next member at once; one that
//! failed or timed out on a member moves later requests on to the next. A key put with the
//! retention lease goes at least the retention after its last write.
//!
//! Limit: a request that may have reached a member is never sent again (it may have been
//! executed); its caller hears the failure and decides.

use std::future::Future;
use std::time::Duration;

use etcd_client::{
    Client, GetOptions, GetResponse, PutOptions, Txn, TxnOp, TxnResponse, WatchOptions, WatchStream,
};

use super::errors::{driver, from_etcd, is_transient, never_sent};
use super::keys::EtcdKeys;
use super::{is_lease_not_found, EtcdStore};
use crate::error::{Error, Phase, Result};

impl EtcdStore {
    /// Overall bound of one request: a reply, and a connection opened on the way.
    pub(super) fn limit(&self) -> Duration {
        self.response_timeout + self.connect_timeout
    }

    /// One request to the current member, counted and bounded; a failure is [`Error::Store`] for
    /// `phase`. A request that provably never reached the member (the connection was refused) goes
    /// to the next member at once; one that failed or timed out there moves later requests on to
    /// the next member, and is not sent again (it may have been executed).
    pub(super) async fn call<T, F, Fut>(&self, phase: Phase, op: F) -> Result<T>
    where
        F: Fn(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, etcd_client::Error>>,
    {
        let limit = self.limit();
        let mut refused = None;
        for _ in 0..self.members.len() {
            let i = self.members.current();
            self.meta.count(1);
            let attempt = async {
                let client = self.members.client(i).await?;
                op(client).await
            };
            match tokio::time::timeout(limit, attempt).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) if never_sent(&e) => {
                    self.members.skip(i);
                    refused = Some(e);
                }
                Ok(Err(e)) => {
                    if is_transient(&e) {
                        self.members.skip(i);
                    }
                    return Err(from_etcd(phase, e));
                }
                Err(_) => {
                    self.members.skip(i);
                    return Err(Error::Timeout {
                        phase,
                        after: limit,
                    });
                }
            }
        }
        Err(from_etcd(
            phase,
            refused.unwrap_or_else(|| {
                etcd_client::Error::InvalidArgs("the URL names no member".to_owned())
            }),
        ))
    }

    pub(super) async fn txn(&self, phase: Phase, txn: Txn) -> Result<TxnResponse> {
        let r = self
            .call(phase, |mut c| {
                let txn = txn.clone();
                async move { c.txn(txn).await }
            })
            .await;
        if let Some(source) = r.as_ref().err().and_then(driver) {
            if is_lease_not_found(source) {
                // Perhaps the records' lease (a cluster restored from an older snapshot): the next
                // write grants a new one.
                self.records.forget().await;
            }
        }
        r
    }

    /// A put of the name's fence record, attached to the current retention lease, so that the
    /// record of a name no longer used goes after the retention.
    pub(super) async fn put_record(
        &self,
        keys: &EtcdKeys,
        value: &str,
        phase: Phase,
    ) -> Result<TxnOp> {
        self.put_kept(keys.record.clone(), value.as_bytes().to_vec(), phase)
            .await
    }

    /// A put of `key` attached to the current retention lease: it goes the retention after its last
    /// write.
    pub(super) async fn put_kept(
        &self,
        key: String,
        value: Vec<u8>,
        phase: Phase,
    ) -> Result<TxnOp> {
        let ttl = self.records.ttl_s();
        let lease = self
            .records
            .get(|| async {
                self.call(phase, |mut c| async move { c.lease_grant(ttl, None).await })
                    .await
                    .map(|granted| granted.id())
            })
            .await?;
        Ok(TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        ))
    }

    pub(super) async fn get(
        &self,
        phase: Phase,
        key: Vec<u8>,
        options: GetOptions,
    ) -> Result<GetResponse> {
        self.call(phase, |mut c| {
            let (key, options) = (key.clone(), options.clone());
            async move { c.get(key, Some(options)).await }
        })
        .await
    }

    pub(super) async fn watch(&self, key: Vec<u8>, options: WatchOptions) -> Result<WatchStream> {
        self.call(Phase::Wait, |mut c| {
            let (key, options) = (key.clone(), options.clone());
            async move { c.watch(key, Some(options)).await }
        })
        .await
    }

    /// Keeps leases `ids` alive on the shared stream: per id whether etcd still had it.
    pub(super) async fn keep_alive(&self, ids: &[i64], phase: Phase) -> Result<Vec<bool>> {
        let limit = self.limit();
        match tokio::time::timeout(limit, self.keepalives.renew(ids)).await {
            Ok(Ok(alive)) => Ok(alive),
            Ok(Err(source)) => Err(from_etcd(phase, source)),
            Err(_) => {
                // The stream may be stuck on a member that stopped answering: open another.
                self.keepalives.reset().await;
                Err(Error::Timeout {
                    phase,
                    after: limit,
                })
            }
        }
    }
}
