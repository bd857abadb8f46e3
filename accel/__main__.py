from accel.cli import main

raise SystemExit(main())
