// The teaching side of the run page, started once by run.js: narration, stage-by-stage playback,
// lessons, predict-then-reveal, what-if and compare (one module each).

import { initNarration } from "./narration.js";
import { initPlayback } from "./playback.js";
import { initPredict } from "./predict.js";
import { initLesson } from "./lesson.js";
import { initWhatIf } from "./whatif.js";
import { initCompare } from "./compare.js";

export function initTeach() {
  initNarration();
  initPlayback();
  initPredict();
  initWhatIf();
  initCompare();
  initLesson();
}
