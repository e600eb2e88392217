// Runs named checks one after another, printing one PASS, FAIL or SKIP line each.

// Thrown by a check that cannot run meaningfully; its message says why.
export class Skip extends Error {}

// Prints a remark under the current check's line.
export function note(text) {
  console.log(`      ${text}`);
}

export class CheckRunner {
  // timeout_ms: the most one check may take. blocker(): why no check can run now (for example the
  // server has died), or null; checks then fail at once instead of each waiting for timeouts.
  constructor({ timeout_ms, blocker = () => null }) {
    this.timeout_ms = timeout_ms;
    this.blocker = blocker;
    this.counts = { PASS: 0, FAIL: 0, SKIP: 0 };
  }

  async run(name, check) {
    const blocked = this.blocker();
    if (blocked) return this.report("FAIL", name, blocked);
    try {
      await with_timeout(check(), this.timeout_ms, `took longer than ${this.timeout_ms / 1000} s`);
      this.report("PASS", name);
    } catch (error) {
      if (error instanceof Skip) this.report("SKIP", name, error.message);
      else this.report("FAIL", name, error?.message ?? String(error));
    }
  }

  report(outcome, name, detail) {
    this.counts[outcome]++;
    const lines = detail ? `: ${detail}`.split("\n").filter((line) => line.trim() !== "") : [""];
    console.log(`${outcome} ${name}${lines[0]}`);
    for (const line of lines.slice(1)) note(line);
  }

  get passed() {
    return this.counts.FAIL === 0;
  }

  summary() {
    const { PASS, FAIL, SKIP } = this.counts;
    return `${PASS} passed, ${FAIL} failed, ${SKIP} skipped`;
  }
}

// Settles like `promise`, or rejects with `message` after timeout_ms.
function with_timeout(promise, timeout_ms, message) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), timeout_ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
