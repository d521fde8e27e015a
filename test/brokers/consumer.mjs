// The test's Node consumer: runs a reference consumer of examples/consumers with a phase hook.
// Every step prints "PHASE <phase> <message id>"; with STOP_PHASE=<phase> (and STOP_NTH=<n>,
// default 1) the n-th time that phase is reached it prints "STOPPED <phase> <id>" and waits
// there, so the test can SIGKILL it at exactly that point.
//   node consumer.mjs queue|stream
const model = process.argv[2];
const { main } = await import(`../../examples/consumers/${model}_consumer.js`);
let seen = 0;
await main(async (phase, id) => {
  process.stdout.write(`PHASE ${phase} ${id}\n`);
  if (phase === process.env.STOP_PHASE && ++seen === Number(process.env.STOP_NTH ?? 1)) {
    process.stdout.write(`STOPPED ${phase} ${id}\n`);
    await new Promise(() => {}); // until the test kills us
  }
});
