// What the gateway's dashboard API sends and takes (gateway/dashboard_types.go).

export interface Hello {
  kind: string;
  name: string;
  namespace: string;
  team?: string;
  screens: boolean;
  cancelOthers: boolean;
}

export interface Member {
  name: string;
  status: string;
  phase?: string;
  agentStatus?: string;
  agentStatusSince?: string;
  waiting?: string;
  paneId?: string;
  team?: string;
  role?: string;
  profile?: string;
  queueDepth?: number;
  inFlight?: string;
  inFlightContent?: string;
  self?: boolean;
  terminating?: boolean;
  contextRemainingPercent: number | null;
  agent?: string;
  restarts?: number;
  lastRestartReason?: string;
  nodeName?: string;
  podName?: string;
  podPool?: string;
  suspendedAt?: string;
  suspendedReason?: string;
  usage?: string;
  cost?: string;
}

export interface Members {
  reset?: boolean;
  members: Member[];
  removed?: string[];
}

export interface Pool {
  name: string;
  size: number;
  free: number;
  starting: number;
  claimed: number;
}

export interface Pools {
  reset?: boolean;
  pools: Pool[];
  removed?: string[];
}

export interface MemberPage {
  name: string;
  member: Member | null;
}

export interface Step {
  step: string;
  at?: string;
  text?: string;
  turnId?: string;
}

export interface Message {
  dispatchId: string;
  fromKind: string;
  fromName: string;
  fromYou?: boolean;
  content: string;
  contentTruncated?: boolean;
  phase: string;
  outcome?: string;
  wait: boolean;
  deadline?: string;
  steps: Step[];
  cancellable?: boolean;
  usage?: string;
  cost?: string;
}

export interface Messages {
  reset?: boolean;
  messages: Message[];
  removed?: string[];
  total?: number;
}

export interface Screen {
  paneId?: string;
  text: string;
  unavailable?: string;
}

export interface Failure {
  code: string;
  message: string;
}

/** A request the gateway refused, with its code and why. */
export class Refused extends Error {
  constructor(
    readonly status: number,
    readonly failure: Failure,
  ) {
    super(failure.message);
  }
}

/** failureOf reads the {error: {code, message}} body of a refused request. */
export async function failureOf(res: Response): Promise<Failure> {
  try {
    const body = (await res.json()) as { error?: Failure };
    if (body.error) return body.error;
  } catch {
    // Not JSON: say what HTTP said.
  }
  return { code: String(res.status), message: res.statusText || `HTTP ${res.status}` };
}

/** post sends a JSON body with the viewer's token and returns the JSON answer. */
export async function post<T>(token: string, url: string, body: unknown): Promise<T> {
  const res = await fetch(url, {
    method: "POST",
    headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
    cache: "no-store",
  });
  if (!res.ok) throw new Refused(res.status, await failureOf(res));
  return (await res.json()) as T;
}
