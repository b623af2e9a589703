import sys

from eas_agent.agent import main

sys.exit(main())
