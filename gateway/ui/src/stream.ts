// Server-sent events over fetch, so that the token travels in the
// Authorization header (EventSource cannot set one, and a token in a URL
// ends up in logs and history).

import { Failure, Refused, failureOf } from "./api";

export type StreamState = "connecting" | "live" | "retrying";

export interface StreamHandlers {
  /** event is called for every event, with its JSON data decoded. */
  event(name: string, data: unknown): void;
  /** state says whether the stream is live; anything shown while it is not may be stale. */
  state(state: StreamState, detail?: string): void;
  /** refused ends the stream: the token is not accepted, or may not see this. */
  refused(err: Refused): void;
}

// A stream that sends nothing (not even its keepalive, every 15s) for this
// long is taken for dead and opened again.
const silenceLimit = 40_000;
const retryMin = 500;
const retryMax = 10_000;

// Codes that end a stream for good: asking again gets the same answer.
const final = new Set(["unauthorized", "forbidden", "not_team_member", "not_found"]);

/** EventStream keeps one event stream open until close, reconnecting with backoff. */
export class EventStream {
  private closed = false;
  private attempt: AbortController | null = null;
  private retry = retryMin;

  constructor(
    private readonly url: string,
    private readonly token: string,
    private readonly on: StreamHandlers,
  ) {
    void this.loop();
  }

  /** close ends the stream; the server lets go of everything it held for it. */
  close(): void {
    this.closed = true;
    this.attempt?.abort();
  }

  private async loop(): Promise<void> {
    while (!this.closed) {
      this.on.state("connecting");
      let why = "";
      try {
        await this.once();
      } catch (e) {
        if (e instanceof Refused && (e.status === 401 || e.status === 403 || final.has(e.failure.code))) {
          this.closed = true;
          this.on.refused(e);
          return;
        }
        why = e instanceof Error ? e.message : String(e);
      }
      if (this.closed) return;
      this.on.state("retrying", why || "the stream ended");
      await new Promise((resolve) => setTimeout(resolve, this.retry));
      this.retry = Math.min(this.retry * 2, retryMax);
    }
  }

  private async once(): Promise<void> {
    const ctl = new AbortController();
    this.attempt = ctl;
    let watchdog = setTimeout(() => ctl.abort(), silenceLimit);
    try {
      const res = await fetch(this.url, {
        headers: { Authorization: `Bearer ${this.token}`, Accept: "text/event-stream" },
        cache: "no-store",
        signal: ctl.signal,
      });
      if (!res.ok || !res.body) throw new Refused(res.status, await failureOf(res));
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      let live = false;
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        clearTimeout(watchdog);
        watchdog = setTimeout(() => ctl.abort(), silenceLimit);
        let from = Math.max(0, buf.length - 1);
        buf += value;
        let start = 0;
        for (;;) {
          const end = buf.indexOf("\n\n", from);
          if (end < 0) break;
          const failure = this.dispatch(buf.slice(start, end));
          if (failure) throw new Refused(0, failure);
          if (!live) {
            live = true;
            this.retry = retryMin;
            this.on.state("live");
          }
          start = from = end + 2;
        }
        buf = buf.slice(start);
      }
    } finally {
      clearTimeout(watchdog);
    }
  }

  // dispatch hands one frame's event on; an "error" event is returned.
  private dispatch(frame: string): Failure | null {
    let name = "message";
    const data: string[] = [];
    for (const line of frame.split("\n")) {
      if (line.startsWith("event: ")) name = line.slice(7);
      else if (line.startsWith("data: ")) data.push(line.slice(6));
    }
    if (data.length === 0) return null;
    const value: unknown = JSON.parse(data.join("\n"));
    if (name === "error") return (value as { error: Failure }).error;
    this.on.event(name, value);
    return null;
  }
}
