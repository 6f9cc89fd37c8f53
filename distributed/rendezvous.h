// How the ranks of a job meet: rank 0 hosts the TCP store at MASTER_ADDR:MASTER_PORT, every
// rank connects to it and announces itself, and nobody goes on until all have. A rank that
// never arrives makes the others fail after the timeout with a message naming it.
#pragma once

#include <memory>

#include "distributed/launch_env.h"
#include "distributed/store.h"
#include "distributed/tcp_store.h"

namespace rt::dist {

// Announces `rank` and waits up to `timeout` for all `world` ranks, then checks that they
// agree on the world size. Called again on the same store it is a barrier: a rank's n-th join
// meets the others' n-th; once it returns, this rank's join made its last request, so it
// is the barrier to pass before rank 0 shuts the store down. On timeout: "rendezvous: ranks 2, 3 of 4 did not arrive within
// 30.0 s (...how to fix...)".
void join(Store& store, int rank, int world, Millis timeout);

// The store of a running job. On rank 0 it also owns the server, which the other ranks need
// for as long as they use the store: join() once more before rank 0 lets this go.
struct RendezvousStore {
  std::unique_ptr<TcpStoreServer> server;  // rank 0 only; declared first, so destroyed last
  std::unique_ptr<TcpStore> store;
};

// Rank 0 hosts the server (on MASTER_ADDR when it is a loopback address, else on every
// interface, since MASTER_ADDR may name this machine differently from how it resolves here),
// every rank connects (retrying while rank 0 is not up yet) and all join(). `timeout` bounds
// the whole of it. One process (world 1) gets a store of its own on 127.0.0.1.
RendezvousStore connect_store(const LaunchEnv& env, Millis timeout);

}  // namespace rt::dist
