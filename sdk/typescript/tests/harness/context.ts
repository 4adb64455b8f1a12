// What the scenarios share: the daemon, a fault proxy in front of it, the conformance check every
// client's answers pass through, and clients of both.

import { Client, type ClientOptions } from "@sandboxd/sdk";
import { Conformance } from "./conformance.js";
import { startDaemon, type Daemon, type DaemonOptions } from "./daemon.js";
import { FaultProxy } from "./proxy.js";

export class Context {
  daemon!: Daemon;
  proxy!: FaultProxy;
  readonly conformance = new Conformance();
  /** A client of the daemon itself. */
  client!: Client;
  /** A client through the fault proxy, retrying quickly. */
  proxied!: Client;
  readonly #others: { daemon: Daemon }[] = [];

  async start(opts: DaemonOptions = {}): Promise<void> {
    this.daemon = await startDaemon(opts);
    this.proxy = await FaultProxy.start(this.daemon.url);
    this.client = this.newClient();
    this.proxied = this.newClient({ url: this.proxy.url, retry: { minDelayMs: 10, maxDelayMs: 50 } });
  }

  /** A client of this daemon whose answers are checked; options override the defaults. */
  newClient(opts: ClientOptions = {}): Client {
    return new Client({ url: this.daemon.url, token: this.daemon.token, fetch: this.conformance.fetch, ...opts });
  }

  /** Starts another daemon, stopped with this one. */
  async another(opts: DaemonOptions): Promise<Daemon> {
    const daemon = await startDaemon(opts);
    this.#others.push({ daemon });
    return daemon;
  }

  async stop(): Promise<void> {
    await this.proxy?.close();
    for (const { daemon } of this.#others) await daemon.stop();
    await this.daemon?.stop();
  }
}
