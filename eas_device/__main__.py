import sys

from eas_device.agent import main

sys.exit(main())
