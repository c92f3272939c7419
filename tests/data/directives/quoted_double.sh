#!/bin/bash
#RSA_DATA_IN="/gpfs/alice/my input"
#RSA_DATA_OUT "/gpfs/alice/my output"
