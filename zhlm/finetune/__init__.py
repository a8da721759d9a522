"""Fine-tuning: task kinds in a registry (:mod:`zhlm.finetune.kinds`), the loop
(:mod:`zhlm.finetune.train`), the predictor (:mod:`zhlm.finetune.predict`), their readers and
metrics (CMRC 2018, conlleval)."""
