// Runs `pagoda serve` as a child process on a free loopback port for the end-to-end tests.
import { spawn } from "node:child_process";
import net from "node:net";

const kLogLines = 200;  // lines of server output kept for failure reports
const kPortAttempts = 3;

// A loopback port nobody listens on now. Another process can take it before the server binds it,
// which start_server handles by trying a new port.
export function free_port() {
  return new Promise((resolve, reject) => {
    const probe = net.createServer();
    probe.on("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

// One running server process. Its output is kept (the last kLogLines lines) for failure reports,
// and it is killed if this process exits first.
export class ServerProcess {
  constructor(binary, args, port) {
    this.port = port;
    this.exit = null;  // {code, signal} once the process has ended
    this.lines = [];
    this.child = spawn(binary, args, { stdio: ["ignore", "pipe", "pipe"] });
    this.exited = new Promise((resolve) => {
      this.child.on("exit", (code, signal) => resolve((this.exit = { code, signal })));
      this.child.on("error", (error) => {
        this.keep_line(`failed to start ${binary}: ${error.message}`);
        resolve((this.exit = { code: null, signal: null, error }));
      });
    });
    this.kill_on_exit = () => this.child.kill("SIGKILL");
    process.on("exit", this.kill_on_exit);
    this.on_stderr_line = null;
    read_lines(this.child.stdout, (line) => this.keep_line(line));
    read_lines(this.child.stderr, (line) => {
      this.keep_line(line);
      this.on_stderr_line?.(line);
    });
  }

  get running() {
    return this.exit === null;
  }

  keep_line(line) {
    this.lines.push(line);
    if (this.lines.length > kLogLines) this.lines.shift();
  }

  log_tail(count = 40) {
    return this.lines.slice(-count).join("\n");
  }

  describe_exit() {
    if (!this.exit) return "is running";
    if (this.exit.error) return `could not start (${this.exit.error.message})`;
    const { code, signal } = this.exit;
    return signal ? `was killed by ${signal}` : `exited with code ${code}`;
  }

  // Resolves once stderr has a line containing `marker`; rejects if the process ends first or
  // timeout_ms passes.
  wait_for_stderr(marker, timeout_ms) {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(new Error(`no "${marker}" on stderr within ${timeout_ms / 1000} s`));
      }, timeout_ms);
      this.on_stderr_line = (line) => {
        if (!line.includes(marker)) return;
        clearTimeout(timer);
        resolve();
      };
      this.exited.then(() => {
        clearTimeout(timer);
        reject(new Error(`server ${this.describe_exit()} before it was ready`));
      });
    });
  }

  // Sends SIGTERM and waits up to grace_ms for the process to end, then kills it. Resolves to
  // {code, signal, graceful}: graceful is false when it had to be killed.
  async stop(grace_ms = 10000) {
    process.off("exit", this.kill_on_exit);
    if (!this.running) return { ...this.exit, graceful: true };
    this.child.kill("SIGTERM");
    let timer;
    const timed_out = new Promise((resolve) => (timer = setTimeout(resolve, grace_ms, "timeout")));
    const outcome = await Promise.race([this.exited, timed_out]);
    clearTimeout(timer);
    if (outcome !== "timeout") return { ...this.exit, graceful: true };
    this.child.kill("SIGKILL");
    await this.exited;
    return { ...this.exit, graceful: false };
  }
}

function read_lines(stream, on_line) {
  let pending = "";
  stream.setEncoding("utf8");
  stream.on("data", (text) => {
    const parts = (pending + text).split("\n");
    pending = parts.pop();
    for (const line of parts) on_line(line);
  });
  stream.on("end", () => pending && on_line(pending));
}

// Starts `pagoda serve` with `args` plus --host and --port on a free port, and resolves to the
// ServerProcess once it prints that it is listening. When the port was taken in the meantime it
// tries another; any other failure rejects with the server's last output.
export async function start_server(binary, args, { ready_timeout_ms = 60000 } = {}) {
  for (let attempt = 1; ; attempt++) {
    const port = await free_port();
    const server = new ServerProcess(
      binary,
      ["serve", ...args, "--host", "127.0.0.1", "--port", String(port)],
      port,
    );
    try {
      await server.wait_for_stderr(`listening on http://127.0.0.1:${port}`, ready_timeout_ms);
      return server;
    } catch (error) {
      await server.stop(2000);
      const port_taken = /\bin use\b|EADDRINUSE/i.test(server.log_tail(kLogLines));
      if (port_taken && attempt < kPortAttempts) continue;
      error.message += `\n--- server output (last lines) ---\n${server.log_tail()}`;
      throw error;
    }
  }
}
