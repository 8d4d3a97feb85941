// fleetd's dashboard: sign in with a token, then the fleet (#/) or one
// member (#/m/<name>), each live from one event stream of the gateway.
//
// The token stays in this tab (sessionStorage) and goes to the gateway in
// the Authorization header only: never in a URL, never in a cookie.

import { Hello, MemberPage, Members, Messages, Pools, Refused, Screen } from "./api";
import { FleetView } from "./fleet";
import { h, setText } from "./dom";
import { MemberView } from "./member";
import { EventStream, StreamState } from "./stream";

const tokenKey = "fleetd.token";
const view = document.getElementById("view")!;
const who = document.getElementById("who")!;
const conn = document.getElementById("conn")!;
const signout = document.getElementById("signout") as HTMLButtonElement;

let current: { close(): void } | null = null;

function showState(state: StreamState | "off", detail?: string): void {
  conn.dataset.state = state;
  setText(conn, state === "live" ? "live" : state === "connecting" ? "connecting…" : state === "retrying" ? `reconnecting (${detail})` : "");
  // What is on screen while the stream is down may be out of date: say so.
  view.classList.toggle("stale", state !== "live" && state !== "off");
}

function showHello(hello: Hello): void {
  const team = hello.team ? `, team ${hello.team}` : "";
  setText(who, `${hello.kind} ${hello.name} in ${hello.namespace}${team}`);
}

function signIn(message = ""): void {
  showState("off");
  setText(who, "");
  signout.hidden = true;
  const token = h("input", { type: "password", name: "token", autocomplete: "off", "aria-label": "token", placeholder: "token", required: true });
  const form = h(
    "form",
    { class: "signin" },
    h("h1", {}, "Sign in"),
    h("p", {}, "Paste a token the gateway accepts: the primary's (", h("code", {}, ".dev/primary-token"), " with make dev), or a Kubernetes service-account token for audience ", h("code", {}, "fleetd"), " (", h("code", {}, "kubectl create token <sa> --audience fleetd"), ")."),
    token,
    h("button", { type: "submit" }, "Sign in"),
    message ? h("p", { class: "refused", role: "alert" }, message) : null,
  );
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(tokenKey, token.value.trim());
    route();
  });
  view.replaceChildren(form);
  token.focus();
}

// refused shows why the gateway said no. A token it does not accept is
// forgotten; one that may not see this page keeps its sign-out button.
function refused(e: Refused): void {
  if (e.status === 401 || e.failure.code === "unauthorized") {
    sessionStorage.removeItem(tokenKey);
    signIn(`The gateway did not accept that token: ${e.failure.message}`);
    return;
  }
  showState("off");
  view.replaceChildren(h("div", { class: "refused", role: "alert" }, h("h1", {}, "Not allowed"), h("p", {}, `${e.failure.code}: ${e.failure.message}`)));
}

function route(): void {
  current?.close();
  current = null;
  const token = sessionStorage.getItem(tokenKey);
  if (!token) {
    signIn();
    return;
  }
  signout.hidden = false;
  const [path, qs] = location.hash.replace(/^#/, "").split("?", 2);
  const member = /^\/m\/(.+)$/.exec(path ?? "");
  if (member) {
    const page = new MemberView(decodeURIComponent(member[1]), token);
    view.replaceChildren(page.el);
    const stream = new EventStream(`api/members/${member[1]}`, token, {
      event(name, data) {
        if (name === "hello") {
          showHello(data as Hello);
          page.hello(data as Hello);
        } else if (name === "member") page.member(data as MemberPage);
        else if (name === "messages") page.messages(data as Messages);
        else if (name === "screen") page.screen(data as Screen);
      },
      state: showState,
      refused,
    });
    current = { close: () => (stream.close(), page.close()) };
    return;
  }
  const fleet = new FleetView(new URLSearchParams(qs ?? ""));
  view.replaceChildren(fleet.el);
  const stream = new EventStream("api/fleet", token, {
    event(name, data) {
      if (name === "hello") showHello(data as Hello);
      else if (name === "members") fleet.apply(data as Members);
      else if (name === "pools") fleet.pools(data as Pools);
    },
    state: showState,
    refused,
  });
  current = { close: () => (stream.close(), fleet.close()) };
}

signout.addEventListener("click", () => {
  sessionStorage.removeItem(tokenKey);
  history.replaceState(null, "", "#/");
  route();
});
window.addEventListener("hashchange", route);
route();
