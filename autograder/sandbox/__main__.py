from .zygote import zygote_main

raise SystemExit(zygote_main())
