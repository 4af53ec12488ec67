"""The embedded workload: a seeded generator of chat and agent traffic.

With no trace, ``kachedb-radix simulate`` replays this. It is built to have the
shapes that make prefix caching pay, and to have them in proportions one sees in
served chat and agent traffic, so the hit-ratio curve has a knee worth finding:

* **shared system prompts with skewed popularity** -- each tenant (a namespace,
  R-NS) has its own pool of system prompts; sessions pick one by a Zipf law, so a
  few are hot and most are cold;
* **multi-turn conversations** growing turn by turn -- each turn's prompt is the
  previous prompt, its reply and a new user message, so the next turn can reuse all
  of the previous one;
* **forks** -- a user edits an earlier message or regenerates: the turn restarts
  from the history as it was after an earlier turn, and the conversation goes on
  from the branch;
* **agent loops** -- a long tool-schema prefix shared by every session of an agent
  type, then many short steps, each appending a tool result and a short call;
* **one-off prompts** -- no shared prefix at all: the misses every cache has;
* **what a client asks to keep** (R-POL-5) -- an agent loop's steps ask a high
  priority held until its next step is due (``agent_priority`` for
  ``agent_retain_for`` clock ticks; the last step asks nothing: the loop is over),
  a one-off call asks a low one (``oneoff_priority``), chat asks none; and tenants
  have tiers: :attr:`WorkloadSpec.tiers` is the ``priority`` policy's
  ``namespaces`` option ``simulate`` uses for this workload. The other policies
  ignore all of it. (Drawing these takes no random numbers: the requests are the
  same tokens with or without them.)

Sessions start as a Poisson process; turns follow after the previous reply plus a
think time (chat) or a tool's run time (agent). Token ids are drawn uniformly from
the vocabulary, so distinct texts never share a block by accident.

Determinism: everything is drawn from one ``numpy.random.Generator`` seeded with
``seed``, in a fixed order; the same spec gives the same requests, token for token.
Cost: O(total prompt tokens) time and memory.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass

import numpy as np

from .trace import Request, Trace

Tokens = np.ndarray  # a 1-D uint32 array of token ids


@dataclass(frozen=True)
class WorkloadSpec:
    """The generator's knobs; the defaults are the embedded workload.

    Lengths are medians of log-normal distributions, in tokens; times in seconds.
    """

    requests: int = 2000
    seed: int = 0
    block_size: int = 16
    vocab: int = 128_000
    tenants: int = 3
    system_prompts_per_tenant: int = 12
    agent_types_per_tenant: int = 3
    zipf: float = 1.2
    session_rate: float = 1.5
    chat_share: float = 0.55
    agent_share: float = 0.25
    fork_probability: float = 0.12
    system_tokens: float = 500.0
    schema_tokens: float = 1500.0
    user_tokens: float = 90.0
    reply_tokens: float = 220.0
    observation_tokens: float = 280.0
    call_tokens: float = 50.0
    oneoff_tokens: float = 600.0
    chat_turns: float = 4.0
    agent_steps: float = 8.0
    think_seconds: float = 25.0
    tool_seconds: float = 3.0
    decode_seconds_per_token: float = 0.02
    agent_priority: int = 90
    #: Each request makes three clock ticks (match, insert, release): about 60
    #: requests run between an agent's steps at the default rates.
    agent_retain_for: int = 180
    oneoff_priority: int = 10
    #: A tenant's tier: its default priority under the ``priority`` policy.
    tiers: tuple[tuple[str, int], ...] = (("tenant-1", 60),)
    #: The spread of text lengths (the log-normal's sigma; 0: every length its median).
    length_sigma: float = 0.6
    #: Keep starting sessions until the last request kept, so arrivals do not thin out
    #: at the end (False: stop once enough requests are drawn, as the embedded one does).
    stationary: bool = False

    def priority_options(self) -> dict[str, object]:
        """The ``priority`` policy's options for this workload: its tenants' tiers."""
        return {"namespaces": dict(self.tiers)}


@dataclass
class _Pending:
    """A generated request before ordering: (time, session, turn) orders them."""

    time: float
    session: int
    turn: int
    prompt: Tokens
    output: Tokens
    namespace: str | None
    priority: int | None = None
    retain_for: int | None = None


class _Generator:
    def __init__(self, spec: WorkloadSpec) -> None:
        self.spec = spec
        self.rng = np.random.default_rng(spec.seed)
        names: list[str | None] = [None, *(f"tenant-{k}" for k in range(1, spec.tenants))]
        self.namespaces = names
        self.systems = [
            [self.text(spec.system_tokens) for _ in range(spec.system_prompts_per_tenant)]
            for _ in names
        ]
        self.schemas = [
            [
                np.concatenate([self.text(spec.system_tokens), self.text(spec.schema_tokens)])
                for _ in range(spec.agent_types_per_tenant)
            ]
            for _ in names
        ]

    def text(self, median: float) -> Tokens:
        """Fresh random tokens, a log-normal length around ``median`` (at least 1;
        exactly ``median`` when the spec's ``length_sigma`` is 0)."""
        sigma = self.spec.length_sigma
        if sigma:
            length = max(1, int(self.rng.lognormal(np.log(median), sigma)))
        else:
            length = max(1, round(median))
        return self.rng.integers(0, self.spec.vocab, size=length, dtype=np.uint32)

    def zipf_pick(self, count: int) -> int:
        """An index in [0, count) with probability proportional to 1 / (rank ** zipf)."""
        weights = 1.0 / np.arange(1, count + 1) ** self.spec.zipf
        return int(self.rng.choice(count, p=weights / weights.sum()))

    def turns(self, mean: float) -> int:
        return int(self.rng.geometric(1.0 / mean))

    def session(self, number: int, start: float) -> list[_Pending]:
        spec = self.spec
        tenant = int(self.rng.integers(len(self.namespaces)))
        namespace = self.namespaces[tenant]
        kind = self.rng.random()
        if kind < spec.chat_share:
            return self.chat(number, start, tenant, namespace)
        if kind < spec.chat_share + spec.agent_share:
            return self.agent(number, start, tenant, namespace)
        prompt = self.text(spec.oneoff_tokens)
        output = self.text(spec.reply_tokens)
        return [_Pending(start, number, 0, prompt, output, namespace, spec.oneoff_priority)]

    def chat(self, number: int, start: float, tenant: int, namespace: str | None) -> list[_Pending]:
        spec = self.spec
        history = self.systems[tenant][self.zipf_pick(spec.system_prompts_per_tenant)]
        states = [history]  # the history after each turn, for forks
        made: list[_Pending] = []
        now = start
        for turn in range(min(self.turns(spec.chat_turns), 24)):
            if turn >= 2 and self.rng.random() < spec.fork_probability:
                history = states[int(self.rng.integers(1, len(states)))]  # edit or regenerate
            prompt = np.concatenate([history, self.text(spec.user_tokens)])
            output = self.text(spec.reply_tokens)
            made.append(_Pending(now, number, turn, prompt, output, namespace))
            history = np.concatenate([prompt, output])
            states.append(history)
            now += len(output) * spec.decode_seconds_per_token
            now += self.rng.lognormal(np.log(spec.think_seconds), 0.8)
        return made

    def agent(
        self, number: int, start: float, tenant: int, namespace: str | None
    ) -> list[_Pending]:
        spec = self.spec
        schema = self.schemas[tenant][self.zipf_pick(spec.agent_types_per_tenant)]
        history = np.concatenate([schema, self.text(spec.user_tokens * 3)])  # the task
        made: list[_Pending] = []
        now = start
        steps = min(self.turns(spec.agent_steps), 40)
        for step in range(steps):
            if step:
                history = np.concatenate([history, self.text(spec.observation_tokens)])
            output = self.text(spec.call_tokens)
            made.append(_Pending(now, number, step, history, output, namespace))
            if step < steps - 1:  # its client knows another step follows
                made[-1].priority = spec.agent_priority
                made[-1].retain_for = spec.agent_retain_for
            history = np.concatenate([history, output])
            now += len(output) * spec.decode_seconds_per_token
            now += self.rng.lognormal(np.log(spec.tool_seconds), 0.5)
        return made


def _nth_time(pending: list[_Pending], count: int) -> float:
    """The arrival time of the ``count``-th earliest request. O(n)."""
    times = np.fromiter((made.time for made in pending), np.float64, len(pending))
    return float(np.partition(times, count - 1)[count - 1])


def generate_requests(spec: WorkloadSpec) -> list[Request]:
    """The spec's requests in arrival order (ties: session, then turn). O(total tokens).

    Raises:
        ValueError: ``spec.requests`` < 1 or ``spec.tenants`` < 1.
    """
    if spec.requests < 1 or spec.tenants < 1:
        raise ValueError("a workload needs at least one request and one tenant")
    generator = _Generator(spec)
    pending: list[_Pending] = []
    start = 0.0
    session = 0
    while len(pending) < spec.requests:
        start += generator.rng.exponential(1.0 / spec.session_rate)
        pending.extend(generator.session(session, start))
        session += 1
    while spec.stationary and start < _nth_time(pending, spec.requests):
        # Sessions keep starting until the last request kept: no lull at the end.
        start += generator.rng.exponential(1.0 / spec.session_rate)
        pending.extend(generator.session(session, start))
        session += 1
    pending.sort(key=lambda made: (made.time, made.session, made.turn))
    requests = []
    for made in pending[: spec.requests]:
        prompt = array("I", made.prompt.tobytes())
        requests.append(
            Request(
                tokens=prompt,
                sequence=prompt + array("I", made.output.tobytes()),
                prompt_tokens=len(prompt),
                output_tokens=len(made.output),
                timestamp=round(made.time * 1000.0, 3),
                namespace=made.namespace,
                priority=made.priority,
                retain_for=made.retain_for,
            )
        )
    return requests


def generate(spec: WorkloadSpec | None = None) -> Trace:
    """The generated workload as a token trace with ``spec.block_size`` tokens per block."""
    spec = spec or WorkloadSpec()
    source = f"embedded workload (seed {spec.seed})"
    return Trace(generate_requests(spec), "tokens", spec.block_size, 1, source)


#: The seed article's benchmark workload ("average prompt size: 6,144 tokens, average
#: response size: 256 tokens, block size: 16 tokens", a simulated multi-turn chat): one
#: tenant, four shared 3,260-token system prompts, chats of geometric length (mean 8
#: turns, at most 24), each turn a 256-token user message and a 256-token reply, no
#: forks, no agents, no one-off prompts, every length exact. A turn's prompt is the
#: system prompt and the history so far. A load generator's users answer within about
#: a second, and sessions keep starting (2.5 a second) until the last request: the
#: default 2,000 requests arrive at about 17 a second over about 2 minutes, their mean
#: prompt 6,123 tokens (the system prompt's length was chosen to give that mean).
SEED_TABLE = WorkloadSpec(
    tenants=1,
    system_prompts_per_tenant=4,
    chat_share=1.0,
    agent_share=0.0,
    fork_probability=0.0,
    system_tokens=3260.0,
    user_tokens=256.0,
    reply_tokens=256.0,
    chat_turns=8.0,
    session_rate=2.5,
    think_seconds=1.0,
    decode_seconds_per_token=0.004,
    length_sigma=0.0,
    stationary=True,
    tiers=(),
)

#: The embedded workloads ``--workload`` names.
WORKLOADS = {"chat-agent": WorkloadSpec(), "seed-table": SEED_TABLE}
