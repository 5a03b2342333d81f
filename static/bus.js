// The teaching modules' handle on the run page. run.js fills `ctl` with the page's own actions
// (open a step, choose a stage, load another run in place) and calls emitView() after every
// change of run, step, stage or language; narration.js, playback.js, lesson.js, predict.js,
// whatif.js and compare.js listen with onView() and never import run.js.

export const ctl = {
  showStep: async (_n) => {},        // open step n (clamped to the run)
  setStage: (_name) => {},           // choose a stage of the current step
  load: async (_src, _at) => {},     // {preset} | {link}: load a run in place, at {step, stage}
  stopPlay: () => {},                // stop the step player
};

const listeners = [];

// fn(what): what is "run" (a run was loaded), "step", "stage" or "lang"
export function onView(fn) { listeners.push(fn); }

export function emitView(what) {
  for (const fn of listeners) {
    try { fn(what); } catch (err) { console.error(err); }
  }
}
