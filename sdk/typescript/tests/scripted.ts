/**
 * A real HTTP server on a loopback port that answers from a script, one reply per request
 * in order (the last one repeats), and records every request. It stands in for a server
 * (or a proxy in front of one) failing in ways the real app cannot be made to fail on
 * demand: 429 with Retry-After, 502/503/504, hanging.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface Reply {
  status?: number;
  body?: unknown;
  headers?: Record<string, string>;
  /** Hold the response back until the server stops (so the client's timeout fires). */
  hang?: boolean;
}

export interface Seen {
  method: string;
  path: string;
  body: unknown;
  headers: IncomingMessage["headers"];
}

export class ScriptedServer {
  url = "";
  seen: Seen[] = [];
  private script: Reply[] = [{ status: 200, body: {} }];
  private readonly hanging: ServerResponse[] = [];
  private readonly server: Server;

  constructor() {
    this.server = createServer((request, response) => {
      const chunks: Buffer[] = [];
      request.on("data", (chunk: Buffer) => chunks.push(chunk));
      request.on("end", () => {
        const raw = Buffer.concat(chunks).toString("utf8");
        this.seen.push({
          method: request.method ?? "",
          path: request.url ?? "",
          body: raw ? JSON.parse(raw) : null,
          headers: request.headers,
        });
        const reply = this.script.length > 1 ? this.script.shift()! : this.script[0]!;
        if (reply.hang) {
          this.hanging.push(response);
          return;
        }
        const payload = reply.body === undefined ? "" : JSON.stringify(reply.body);
        response.writeHead(reply.status ?? 200, {
          "content-type": "application/json",
          ...reply.headers,
        });
        response.end(payload);
      });
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    const { port } = this.server.address() as AddressInfo;
    this.url = `http://127.0.0.1:${port}`;
    return this;
  }

  answer(...replies: Reply[]): void {
    this.script = replies;
    this.seen = [];
  }

  async stop(): Promise<void> {
    for (const response of this.hanging) response.destroy();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
